// libFuzzer target: config.json parsing and validation (ParseModelConfig).
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

namespace {

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
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
