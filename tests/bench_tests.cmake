# pdserve-bench: the load generator's library (schedules, lengths, statistics,
# goodput), and an end-to-end run against the local stack on a small model.
pdserve_test(load_gen_test)
target_link_libraries(load_gen_test PRIVATE pdserve_load_gen)

add_test(NAME bench_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bench_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(bench_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)
