# Co-tenancy and load-time limits: the OpenMP wait policy of the engine
# binaries, CPU feature detection / PDSERVE_ISA, and the memory estimate.
pdserve_test(omp_env_test)
pdserve_test(cpu_features_test)
pdserve_test(memory_estimate_test TORCH)
# The real binaries: the policy in effect, the refusals at start.
add_test(NAME host_limits_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/host_limits_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(host_limits_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)
