# The NCCL KV hand-off's tests, built only with PDSERVE_HAVE_NCCL (see the
# top CMakeLists.txt):
#   nccl_kv_transfer_test   unit: the fallbacks to gRPC and the decode
#                           side's checks, on machines without a GPU (CI);
#   nccl_handoff_gpu_test   gpu: real prefill and decode processes moving
#                           hand-offs over NCCL between GPUs 0 and 1. CPU CI
#                           runs `ctest -LE gpu`; on a GPU machine:
#                           `ctest -L gpu --output-on-failure`.
if(NOT PDSERVE_HAVE_NCCL)
  return()
endif()

pdserve_test(nccl_kv_transfer_test TORCH)
target_link_libraries(nccl_kv_transfer_test PRIVATE pdserve_handoff)

add_executable(nccl_handoff_gpu_test gpu/nccl_handoff_gpu_test.cc)
target_link_libraries(nccl_handoff_gpu_test PRIVATE GTest::gtest GTest::gtest_main pdserve_handoff pdserve_warnings)
target_compile_definitions(nccl_handoff_gpu_test PRIVATE PDSERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
target_precompile_headers(nccl_handoff_gpu_test REUSE_FROM pdserve_engine)
add_dependencies(nccl_handoff_gpu_test pdserve-prefill pdserve-decode)
add_test(NAME nccl_handoff_gpu_test COMMAND nccl_handoff_gpu_test)
set_tests_properties(nccl_handoff_gpu_test PROPERTIES LABELS gpu TIMEOUT 600)
