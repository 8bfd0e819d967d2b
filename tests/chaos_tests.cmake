# The chaos suite (tests/chaos/, docs/reliability.md): the serving stack as separate
# processes under load, kill -9/restart and SIGSTOP/SIGCONT of workers, and
# hand-off faults (PDSERVE_FAULT_HANDOFF). CI size: N=300 on the tiny model,
# N=60 on the small one. Larger runs: tests/chaos/chaos.sh --build DIR --n 5000.
set(PDSERVE_CHAOS_PY ${CMAKE_CURRENT_SOURCE_DIR}/chaos/chaos.py)
add_test(NAME chaos_tiny_test
         COMMAND /usr/bin/python3 ${PDSERVE_CHAOS_PY} --build ${PROJECT_BINARY_DIR}
                 --config ${PROJECT_SOURCE_DIR}/configs/tiny.json --n 300 --seed 1)
add_test(NAME chaos_small_test
         COMMAND /usr/bin/python3 ${PDSERVE_CHAOS_PY} --build ${PROJECT_BINARY_DIR}
                 --config ${PROJECT_SOURCE_DIR}/configs/small.json --n 60 --seed 2 --fault-gap-s 1.0)
set_tests_properties(chaos_tiny_test chaos_small_test PROPERTIES LABELS chaos TIMEOUT 1200 RUN_SERIAL TRUE)

# The hand-off fault injector itself (what each fault does to the chunks).
add_executable(fault_injection_test chaos/fault_injection_test.cc)
target_link_libraries(fault_injection_test PRIVATE GTest::gtest GTest::gtest_main pdserve_handoff pdserve_warnings)
target_precompile_headers(fault_injection_test REUSE_FROM pdserve_engine)
add_test(NAME fault_injection_test COMMAND fault_injection_test)
set_tests_properties(fault_injection_test PROPERTIES LABELS unit)
