# libFuzzer targets (tests/fuzz/, docs/reliability.md): every target for 30 s on its
# checked-in seed corpus, ASan + UBSan, from scripts/fuzz.sh. The fuzz tree is
# a separate clang build (build-fuzz/, configured and built by the script on
# first use, a few minutes on 2 cores). Fails on any crash, leak, timeout,
# sanitizer report or broken property; scripts/fuzz.sh TARGET SECONDS runs
# longer.
add_test(NAME fuzz_smoke_test COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh all 30)
set_tests_properties(fuzz_smoke_test PROPERTIES LABELS fuzz TIMEOUT 1800 RUN_SERIAL TRUE)
