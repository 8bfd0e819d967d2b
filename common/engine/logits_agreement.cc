#include "common/engine/logits_agreement.h"

#include <ATen/ATen.h>

#include <algorithm>

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
