// How closely a quantized engine follows a reference one: both are fed the
// reference's own greedy tokens (teacher forcing, so one early mismatch does
// not derail the rest), and every step's logits are compared.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/engine.h"

namespace pdserve {

struct LogitsAgreement {
  int64_t steps = 0;         // logits rows compared (the prefill's last + each decode step)
  int64_t top1_agree = 0;    // rows whose argmax is the same
  double min_cosine = 1.0;   // worst row's cosine similarity
  double mean_cosine = 0.0;
  double top1_rate() const { return steps == 0 ? 0.0 : static_cast<double>(top1_agree) / steps; }
};

// Prefills `prompt` into both engines, then runs `steps` greedy decode steps
// of `ref`, feeding the same token to `test`. Errors from either engine.
absl::StatusOr<LogitsAgreement> CompareGreedy(const Engine& ref, const Engine& test,
                                              const std::vector<int64_t>& prompt, int64_t steps);

}  // namespace pdserve
