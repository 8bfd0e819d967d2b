# pdserve-passkey: passkey retrieval (Mohtashami & Jaggi) as a batch client
# of the public API. The prompt/passkey/statistics logic is a library without
# gRPC so tests/passkey_test.cc can check it with fake token counters.
add_library(pdserve_passkey STATIC passkey.cc)
target_include_directories(pdserve_passkey PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(pdserve_passkey PUBLIC absl::status absl::statusor absl::strings absl::str_format PRIVATE pdserve_warnings)

add_executable(pdserve-passkey passkey_main.cc)
target_link_libraries(pdserve-passkey PRIVATE pdserve_passkey pdserve_cli pdserve_net pdserve_proto gRPC::grpc++
                      nlohmann_json::nlohmann_json pdserve_warnings)
