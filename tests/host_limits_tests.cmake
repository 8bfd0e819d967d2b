# Co-tenancy and load-time limits: the OpenMP wait policy of the engine
# binaries, CPU feature detection / PDSERVE_ISA, and the memory estimate.
pdserve_test(omp_env_test)
pdserve_test(cpu_features_test)
pdserve_test(memory_estimate_test TORCH)
set_tests_properties(memory_estimate_test PROPERTIES ENVIRONMENT "PDSERVE_Q8_KERNEL=fma")  # int8 rows; packs below
# The int8 case with k-major packs (PDSERVE_Q8_KERNEL is read once per process).
add_test(NAME memory_estimate_q8kmajor_test COMMAND memory_estimate_test --gtest_filter=*Int8*)
set_tests_properties(memory_estimate_q8kmajor_test PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "PDSERVE_Q8_KERNEL=dot")
# The real binaries: the policy in effect, the refusals at start.
add_test(NAME host_limits_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/host_limits_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(host_limits_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)
