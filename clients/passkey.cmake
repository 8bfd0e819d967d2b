# pdserve-passkey: passkey retrieval (Mohtashami & Jaggi) as a batch client
# of the public API (its prompt logic, run plan and records: common/passkey).
add_executable(pdserve-passkey passkey_main.cc)
target_link_libraries(pdserve-passkey PRIVATE pdserve_passkey_run pdserve_cli pdserve_net pdserve_proto gRPC::grpc++
                      nlohmann_json::nlohmann_json pdserve_warnings)
