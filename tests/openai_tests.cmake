# The OpenAI-compatible HTTP API through the official `openai` npm client
# (tests/openai/, fetched by scripts/fetch_openai_client.sh): completions and
# chat, streaming and not, usage, a 400, a 404 and a 401, against real
# pdserve-local processes. Skips (77) without node or the package.
add_test(NAME openai_client_test
         COMMAND bash -c "command -v node >/dev/null || { echo 'SKIP: node not found (the test runs the openai npm client)'; exit 77; }; exec node \"$0\" \"$1\" \"$2\""
                 ${CMAKE_CURRENT_SOURCE_DIR}/openai/openai_client_test.mjs ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(openai_client_test PROPERTIES LABELS e2e TIMEOUT 300 SKIP_RETURN_CODE 77)
