# pdserve-bench: a serving benchmark of the public API (like `vllm bench
# serve`). The arrival schedules, length distributions and statistics are a
# library without gRPC so tests/load_gen_test.cc can check them.
add_library(pdserve_load_gen STATIC load_gen.cc)
target_include_directories(pdserve_load_gen PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(pdserve_load_gen PUBLIC absl::status absl::statusor absl::strings nlohmann_json::nlohmann_json
                      PRIVATE pdserve_warnings)

# The backends (gRPC, OpenAI HTTP via cpp-httplib's client) beside main.
add_executable(pdserve-bench bench_main.cc backends.cc)
target_link_libraries(pdserve-bench PRIVATE pdserve_load_gen pdserve_cli pdserve_net pdserve_proto gRPC::grpc++
                      pdserve_security_flags cpp-httplib nlohmann_json::nlohmann_json pdserve_warnings)
