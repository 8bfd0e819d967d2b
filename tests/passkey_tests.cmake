# pdserve-passkey: the prompt/passkey/statistics library and the run (protocols,
# trial records, --resume), and an end-to-end
# run against the local stack on a small random model.
pdserve_test(passkey_test)
target_link_libraries(passkey_test PRIVATE pdserve_passkey_run)

add_test(NAME passkey_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/passkey_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(passkey_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)

# The shipped trained model through separate processes, and README command 1.
add_test(NAME passkey_model_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/passkey_model_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(passkey_model_e2e_test PROPERTIES LABELS e2e TIMEOUT 900)
# Long context (issue 54): the shipped model at 32,768 tokens through separate
# processes (3 trials, 15-40 s in Release on 2 cores), and a 131,072-token prompt over the
# decode worker's KV budget refused before any prefill (RESOURCE_EXHAUSTED naming
# --kv-budget-mb). Label e2e: not run in the ASan tree (scripts/sanitize.sh runs
# the unit label there).
add_test(NAME passkey_32k_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/passkey_32k_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(passkey_32k_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)
add_test(NAME kv_budget_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/kv_budget_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(kv_budget_e2e_test PROPERTIES LABELS e2e TIMEOUT 300)
# RUN_SERIAL: demo.sh runs scripts/build.sh on this build tree, as a user's
# command does. After a commit that reconfigures (the --version commit) and
# relinks every binary, which failed the tests running beside it ("Permission
# denied", "not built") when ctest ran in parallel.
add_test(NAME demo_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/demo_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(demo_e2e_test PROPERTIES LABELS e2e TIMEOUT 900 RUN_SERIAL TRUE)
