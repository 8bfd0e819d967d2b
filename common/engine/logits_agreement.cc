#include "common/engine/logits_agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/kernels/linear_int8.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

void Add(const at::Tensor& a, const at::Tensor& b, LogitsAgreement* r) {
  const at::Tensor x = a.reshape({-1}).to(at::kDouble), y = b.reshape({-1}).to(at::kDouble);
  const double cos = (x.dot(y) / (x.norm() * y.norm())).item<double>();
  r->min_cosine = std::min(r->min_cosine, cos);
  r->mean_cosine += (cos - r->mean_cosine) / static_cast<double>(r->steps + 1);
  if (x.argmax().item<int64_t>() == y.argmax().item<int64_t>()) ++r->top1_agree;
  ++r->steps;
}

}  // namespace

at::Tensor RoundMantissa(const at::Tensor& t, int bits) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && bits >= 1 && bits <= 23, "RoundMantissa: fp32 and 1-23 bits");
  at::Tensor out = t.contiguous().clone();
  const int drop = 23 - bits;
  if (drop == 0) return out;
  auto* p = static_cast<uint32_t*>(out.data_ptr());
  const uint32_t half_minus_one = (1u << (drop - 1)) - 1, keep = ~((1u << drop) - 1);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const uint32_t u = p[i];
    p[i] = (u + half_minus_one + ((u >> drop) & 1)) & keep;  // a carry into the exponent is the right result
  }
  return out;
}

absl::Status RoundMatmulWeights(ModelWeights* w, int bits) {
  if (bits < 1 || bits > 23) return absl::InvalidArgumentError(absl::StrCat("mantissa bits must be 1-23, got ", bits));
  for (NamedTensor& nt : NamedTensors(w)) {
    if (!nt.is_matmul_weight) continue;
    if (nt.tensor->scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat("'", nt.name, "' is not fp32: round fp32 weights only"));
    }
    *nt.tensor = RoundMantissa(*nt.tensor, bits);
  }
  return absl::OkStatus();
}

double RelativeWeightError(const ModelWeights& ref, const ModelWeights& test) {
  // NamedTensors only hands out pointers; nothing below writes through them.
  const std::vector<NamedTensor> r = NamedTensors(const_cast<ModelWeights*>(&ref));
  const std::vector<NamedTensor> t = NamedTensors(const_cast<ModelWeights*>(&test));
  double err = 0, norm = 0;
  for (size_t i = 0; i < r.size() && i < t.size(); ++i) {
    if (!r[i].is_matmul_weight) continue;
    const at::Tensor a = r[i].tensor->to(at::kDouble);
    const at::Tensor b = (IsQ8(*t[i].tensor) ? DequantizeQ8(*t[i].tensor) : *t[i].tensor).to(at::kDouble);
    err += (b - a).pow(2).sum().item<double>();
    norm += a.pow(2).sum().item<double>();
  }
  return norm == 0 ? 0.0 : std::sqrt(err / norm);
}

absl::StatusOr<LogitsAgreement> CompareGreedy(const Engine& ref, const Engine& test,
                                              const std::vector<int64_t>& prompt, int64_t steps) {
  at::NoGradGuard no_grad;
  LogitsAgreement r;
  auto sr = ref.NewSequence(), st = test.NewSequence();
  ASSIGN_OR_RETURN(at::Tensor lr, ref.Prefill(sr.get(), prompt));
  ASSIGN_OR_RETURN(at::Tensor lt, test.Prefill(st.get(), prompt));
  Add(lr, lt, &r);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t token = lr.reshape({-1}).argmax().item<int64_t>();
    ASSIGN_OR_RETURN(lr, ref.DecodeStep({sr.get()}, {token}));
    ASSIGN_OR_RETURN(lt, test.DecodeStep({st.get()}, {token}));
    Add(lr, lt, &r);
  }
  return r;
}

}  // namespace pdserve
