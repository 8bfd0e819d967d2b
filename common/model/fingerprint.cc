#include "common/model/fingerprint.h"

#include <ATen/ATen.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "common/model/moe_mxfp4.h"

namespace pdserve {
namespace {

// A 64-bit multiply-xorshift mix over 8-byte words (not cryptographic: it
// guards against mistakes, not attackers).
class Hasher {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      Word(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    Word(tail ^ (static_cast<uint64_t>(n) << 56));
  }
  void String(const std::string& s) { Bytes(s.data(), s.size()); }
  uint64_t digest() const { return Mix(h_); }

 private:
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
  }
  void Word(uint64_t w) { h_ = (h_ ^ Mix(w)) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; }
  uint64_t h_ = 0x84222325CBF29CE4ull;
};

}  // namespace

std::string ModelFingerprint(const ModelWeights& weights) {
  Hasher h;
  ModelConfig arch = weights.config;
  arch.name.clear();  // a renamed copy of the same model is the same model
  arch.chat_template.reset();  // so is one that chats differently
  arch.chat_format = ChatFormat::kTemplate;
  h.String(arch.ToJson());
  ModelWeights& w = const_cast<ModelWeights&>(weights);  // NamedTensors only reads here
  for (const NamedTensor& nt : NamedTensors(&w)) {
    const at::Tensor t = nt.tensor->detach().contiguous();
    h.String(nt.name);
    h.String(c10::str(t.sizes(), c10::toString(t.scalar_type())));
    h.Bytes(t.data_ptr(), t.nbytes());
  }
  // gpt-oss: the MXFP4 experts' e8m0 scales (1/17 of their bytes: a
  // different checkpoint of the same shapes differs there too).
  for (const LayerWeights& L : weights.layers) {
    if (L.mxfp4 == nullptr) continue;
    for (const auto* mats : {&L.mxfp4->gate_up, &L.mxfp4->down}) {
      for (const Mxfp4Matrix& m : *mats) {
        const int64_t rows = mats == &L.mxfp4->gate_up ? 2 * L.mxfp4->hidden : L.mxfp4->d_model;
        h.Bytes(m.scales, rows * Mxfp4RowScales(m.K));
      }
    }
  }
  return absl::StrFormat("%016x", h.digest());
}

}  // namespace pdserve
