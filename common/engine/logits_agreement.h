// How closely a quantized engine follows a reference one: both are fed the
// reference's own greedy tokens (teacher forcing, so one early mismatch does
// not derail the rest), and every step's logits are compared. Beside it,
// how far a conversion moved the weights, and a baseline to hold it to: the
// same fp32 weights with their mantissas rounded to fewer bits.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/engine.h"
#include "common/model/weights.h"

namespace pdserve {

struct LogitsAgreement {
  int64_t steps = 0;         // logits rows compared (the prefill's last + each decode step)
  int64_t top1_agree = 0;    // rows whose argmax is the same
  double min_cosine = 1.0;   // worst row's cosine similarity
  double mean_cosine = 0.0;
  double top1_rate() const { return steps == 0 ? 0.0 : static_cast<double>(top1_agree) / steps; }
};

// A copy of the fp32 tensor `t` with every value's mantissa rounded to
// `bits` bits (1-23), to nearest, ties to even; 23 copies it unchanged and 7
// rounds as bf16 does. For finite values (an overflow rounds to infinity).
at::Tensor RoundMantissa(const at::Tensor& t, int bits);

// Rounds every matmul weight of `w` (as checkpoints name them) to `bits`
// mantissa bits, in new tensors (copies of `w` keep theirs): a baseline of
// how far a given rounding of the weights alone moves the logits.
// InvalidArgument unless bits is 1-23 and those weights are fp32.
absl::Status RoundMatmulWeights(ModelWeights* w, int bits);

// sqrt(sum (t - r)^2 / sum r^2) over every matmul weight, `test` widened to
// fp32 (int8 dequantized): how far a conversion moved the weights, to set
// beside how far it moved the logits. Both from the same config; `ref` fp32.
double RelativeWeightError(const ModelWeights& ref, const ModelWeights& test);

// Prefills `prompt` into both engines, then runs `steps` greedy decode steps
// of `ref`, feeding the same token to `test`. Errors from either engine.
absl::StatusOr<LogitsAgreement> CompareGreedy(const Engine& ref, const Engine& test,
                                              const std::vector<int64_t>& prompt, int64_t steps);

}  // namespace pdserve
