// The gpt-oss (o200k_harmony) tokenizer.json of the tests: fetched by
// scripts/setup.sh into .cache/tokenizers/gptoss/, or another copy named by
// PDSERVE_GPTOSS_TOKENIZER_JSON. Tests that need it skip one case at a time
// with kGptOssMissing when it is absent (scripts/test_skips.sh fails a CI
// run on such a skip: setup fetches the file there).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace pdserve::testing {

// gpt-oss's vocab_size: the tokenizer's 200,019 ids padded to the model's.
inline constexpr int64_t kGptOssVocabSize = 201088;

inline std::string GptOssPath() {
  if (const char* env = std::getenv("PDSERVE_GPTOSS_TOKENIZER_JSON"); env != nullptr && *env != '\0') return env;
  return std::string(PDSERVE_SOURCE_DIR) + "/.cache/tokenizers/gptoss/tokenizer.json";
}

// Writes scripts/make_gptoss_checkpoint.py's tiny preset (`seed`, `extra`
// flags) into `out`, its output into `log`; true when the script succeeded.
inline bool MakeTinyGptOss(const std::string& out, const std::string& log, int seed, const std::string& extra = "") {
  const std::string cmd = std::string("/usr/bin/python3 ") + PDSERVE_SOURCE_DIR +
                          "/scripts/make_gptoss_checkpoint.py --preset tiny --seed " + std::to_string(seed) +
                          " --out " + out + " " + extra + " > " + log + " 2>&1";
  return std::system(cmd.c_str()) == 0;
}

inline constexpr char kGptOssMissing[] =
    "; run scripts/fetch_tokenizer.sh gptoss or set PDSERVE_GPTOSS_TOKENIZER_JSON";

}  // namespace pdserve::testing
