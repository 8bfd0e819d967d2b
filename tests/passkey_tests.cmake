# pdserve-passkey: the prompt/passkey/statistics library, and an end-to-end
# run against the local stack on a small random model.
pdserve_test(passkey_test)
target_link_libraries(passkey_test PRIVATE pdserve_passkey)

add_test(NAME passkey_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/passkey_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(passkey_e2e_test PROPERTIES LABELS e2e TIMEOUT 600)

# The shipped trained model through separate processes, and README command 1.
add_test(NAME passkey_model_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/passkey_model_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(passkey_model_e2e_test PROPERTIES LABELS e2e TIMEOUT 900)
# RUN_SERIAL: demo.sh runs scripts/build.sh on this build tree, as a user's
# command does. After a commit that reconfigures (the --version commit) and
# relinks every binary, which failed the tests running beside it ("Permission
# denied", "not built") when ctest ran in parallel.
add_test(NAME demo_e2e_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/demo_e2e_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(demo_e2e_test PROPERTIES LABELS e2e TIMEOUT 900 RUN_SERIAL TRUE)
