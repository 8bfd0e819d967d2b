# pdserve-bench: the load generator's library (schedules, lengths, statistics,
# goodput), and an end-to-end run against the local stack on a small model.
pdserve_test(load_gen_test)
target_link_libraries(load_gen_test PRIVATE pdserve_load_gen)

add_test(NAME bench_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bench_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(bench_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)

# 2,000 concurrent streams through pdserve-local: every one ends and the
# process stays at <= 64 threads (the router holds no thread per request).
add_test(NAME router_streams_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/router_streams_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(router_streams_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)
