# pdserve-tokenize: the model's tokenizer on stdin/stdout (no LibTorch).
add_executable(pdserve-tokenize tokenize_main.cc)
target_link_libraries(pdserve-tokenize PRIVATE pdserve_cli pdserve_tokenizer pdserve_warnings)
