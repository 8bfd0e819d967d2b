pdserve_test(train_model_test TORCH)
target_link_libraries(train_model_test PRIVATE pdserve_train)
pdserve_test(passkey_data_test)
target_link_libraries(passkey_data_test PRIVATE pdserve_train)
add_test(NAME train_smoke_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train/train_smoke_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(train_smoke_test PROPERTIES LABELS e2e TIMEOUT 600)
