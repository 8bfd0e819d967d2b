# Char and BPE tokenizers. The LLaMA-3 cases read the tokenizer.json that
# scripts/fetch_tokenizer.sh caches in .cache/tokenizers/llama3/ (or
# $PDSERVE_LLAMA3_TOKENIZER_JSON) and skip when it is absent.
pdserve_test(char_tokenizer_test)
target_link_libraries(char_tokenizer_test PRIVATE pdserve_tokenizer)
pdserve_test(utf8_test)
target_link_libraries(utf8_test PRIVATE pdserve_tokenizer)
pdserve_test(bpe_tokenizer_test)
target_link_libraries(bpe_tokenizer_test PRIVATE pdserve_tokenizer nlohmann_json::nlohmann_json)
# The gpt-oss (o200k_harmony) cases read .cache/tokenizers/gptoss/ (or
# $PDSERVE_GPTOSS_TOKENIZER_JSON), fetched by the same script, and skip
# likewise.
pdserve_test(gptoss_tokenizer_test)
target_link_libraries(gptoss_tokenizer_test PRIVATE pdserve_tokenizer nlohmann_json::nlohmann_json)
