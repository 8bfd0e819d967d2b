// libFuzzer target: config.json parsing and validation (ParseModelConfig,
// and ParseHfGptOssConfig for a Hugging Face gpt-oss config.json).
//
// Properties beyond "no crash, no sanitizer report":
//   - an accepted config passes ValidateModelConfig, and its parameter counts
//     and KV sizes are within the hard limits (no overflow);
//   - ToJson() of an accepted config parses back to the same ToJson();
//   - every error is InvalidArgument with a bounded message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "common/model/config.h"
#include "common/model/hf_config.h"

namespace {

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

// A Hugging Face gpt-oss config: InvalidArgument with a bounded message, or
// a valid config of that family.
void CheckHf(const std::string& text) {
  absl::StatusOr<pdserve::ModelConfig> c = pdserve::ParseHfGptOssConfig(text);
  if (!c.ok()) {
    if (c.status().code() != absl::StatusCode::kInvalidArgument) Fail("hf: unexpected code", c.status().ToString());
    if (c.status().message().size() > 400) Fail("hf: unbounded error message", std::string(c.status().message()));
    return;
  }
  if (c->family != pdserve::ModelFamily::kGptOss) Fail("hf: accepted as another family", c->ToJson());
  if (!pdserve::ValidateModelConfig(*c).ok()) Fail("hf: accepted but invalid", c->ToJson());
  for (int64_t id : c->stop_token_ids) {
    if (id < 0 || id >= c->vocab_size) Fail("hf: stop id outside the vocabulary", c->ToJson());
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (pdserve::IsHfConfig(text)) CheckHf(text);
  absl::StatusOr<pdserve::ModelConfig> c = pdserve::ParseModelConfig(text);
  if (!c.ok()) {
    if (c.status().code() != absl::StatusCode::kInvalidArgument) Fail("unexpected code", c.status().ToString());
    if (c.status().message().size() > 400) Fail("unbounded error message", std::string(c.status().message()));
    return 0;
  }
  if (!pdserve::ValidateModelConfig(*c).ok()) Fail("accepted but invalid", c->ToJson());
  const int64_t total = c->TotalParams();
  if (total <= 0 || total > pdserve::kMaxTotalParams) Fail("parameter count out of range", c->ToJson());
  if (c->ActiveParams() <= 0 || c->ActiveParams() > total) Fail("active parameters out of range", c->ToJson());
  if (c->KvBytesPerTokenPerLayer(4) <= 0) Fail("KV bytes out of range", c->ToJson());
  const std::string json = c->ToJson();
  absl::StatusOr<pdserve::ModelConfig> back = pdserve::ParseModelConfig(json);
  if (!back.ok()) Fail("ToJson does not parse back", back.status().ToString() + " for " + json);
  if (back->ToJson() != json) Fail("ToJson round trip differs", json + " vs " + back->ToJson());
  return 0;
}
