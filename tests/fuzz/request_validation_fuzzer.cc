// libFuzzer target: the public GenerateRequest validation
// (router/request_validation.h), the request parsed from the input bytes as
// a protobuf, as gRPC would hand it to the router.
//
// The first byte picks the model's tokenizer (byte, char, or the fixed BPE of
// tests/fuzz/data/tiny_tokenizer.json) and a small or large cap; the rest is
// the serialised pdserve.v1.GenerateRequest. Properties: an accepted request
// has a non-empty prompt of ids below vocab_size, 1 <= max_new_tokens <= the
// cap, prompt + max_new_tokens <= max_context, a finite temperature, top_p
// in [0, 1] and few non-empty stops; every error is InvalidArgument with a
// bounded message.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/tokenizer/bpe_tokenizer.h"
#include "google/protobuf/stubs/logging.h"
#include "common/tokenizer/byte_tokenizer.h"
#include "common/tokenizer/char_tokenizer.h"
#include "router/request_validation.h"

namespace {

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "request_validation_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

struct Setup {
  pdserve::ModelConfig config;
  std::unique_ptr<pdserve::Tokenizer> tokenizer;
};

// configs/tiny.json's shape, with each tokenizer.
const Setup& Get(int which) {
  static Setup setups[3];
  static bool done = false;
  if (!done) {
    done = true;
    for (int i = 0; i < 3; ++i) {
      pdserve::ModelConfig& c = setups[i].config;
      c.name = "tiny";
      c.vocab_size = 300;
      c.d_model = 64;
      c.n_layers = 4;
      c.n_heads = 4;
      c.n_kv_heads = 2;
      c.head_dim = 16;
      c.window = 8;
      c.expert_hidden = 96;
      c.rope_identity_pairs_global = 2;
      c.max_context = 4096;
    }
    setups[0].tokenizer = std::move(pdserve::ByteTokenizer::Create(300)).value();
    setups[1].tokenizer = std::move(pdserve::CharTokenizer::Create(300)).value();
    std::ifstream in(PDSERVE_SOURCE_DIR "/tests/fuzz/data/tiny_tokenizer.json", std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    auto bpe = pdserve::BpeTokenizer::FromJson(buf.str(), 300);
    if (!bpe.ok()) Fail("the fixed tokenizer does not load", bpe.status().ToString());
    setups[2].tokenizer = std::move(bpe).value();
    for (const Setup& s : setups) {
      if (!pdserve::ValidateModelConfig(s.config).ok()) Fail("bad fixed config", "");
    }
  }
  return setups[which];
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in a string field is logged, then refused
  (void)Get(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Setup& setup = Get(data[0] % 3);
  pdserve::RequestLimits limits;
  if (data[0] & 0x80) {
    limits.max_new_tokens_cap = 0xFFFFFFFFu;  // only max_context bounds it
    limits.max_stop_sequences = 64;
  }
  pdserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  absl::StatusOr<std::vector<uint32_t>> ids =
      pdserve::ValidateGenerateRequest(request, setup.config, *setup.tokenizer, limits);
  if (!ids.ok()) {
    if (ids.status().code() != absl::StatusCode::kInvalidArgument) Fail("unexpected code", ids.status().ToString());
    if (ids.status().message().size() > 600) Fail("unbounded error message", std::string(ids.status().message()));
    return 0;
  }
  const auto& s = request.sampling();
  if (ids->empty()) Fail("accepted an empty prompt", request.ShortDebugString());
  for (uint32_t id : *ids) {
    if (id >= setup.config.vocab_size) Fail("accepted an id beyond vocab_size", request.ShortDebugString());
  }
  if (s.max_new_tokens() < 1 || s.max_new_tokens() > limits.max_new_tokens_cap) {
    Fail("accepted max_new_tokens out of range", request.ShortDebugString());
  }
  if (static_cast<int64_t>(ids->size()) + s.max_new_tokens() > setup.config.max_context) {
    Fail("accepted a request beyond max_context", request.ShortDebugString());
  }
  if (!std::isfinite(s.temperature())) Fail("accepted a non-finite temperature", request.ShortDebugString());
  if (!(s.top_p() >= 0 && s.top_p() <= 1)) Fail("accepted top_p out of range", request.ShortDebugString());
  if (static_cast<uint32_t>(s.stop_size()) > limits.max_stop_sequences) Fail("too many stops", "");
  for (const std::string& stop : s.stop()) {
    if (stop.empty()) Fail("accepted an empty stop", request.ShortDebugString());
  }
  return 0;
}
