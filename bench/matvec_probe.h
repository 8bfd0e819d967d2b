// pdserve-decode-bench's matrix-vector probe: each weight shape of a decode
// step alone, weights cold (round-robin over every layer's and expert's
// copy), through the engine's pdserve::Linear, at::linear and at::mv, and
// the sum over one step's products.
//   CollectProbes  the matrices in the shapes a decode step multiplies
//                  (q|kv and each expert's gate|up fused, as at load)
//   TimeProbes     mean ms per product for each way; the sums per token
//   PrintProbes    the table, against the mean cached step
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace pdserve {
class Engine;
}  // namespace pdserve

namespace pdserve::bench {

struct Probe {
  std::string what;
  std::vector<at::Tensor> pool;
  double per_step;  // calls per decode step
  double ms_linear = 0, ms_at_linear = 0, ms_mv = 0;
};

struct ProbeSums {
  double linear = 0, at_linear = 0, mv = 0;  // ms of one token's products
};

std::vector<Probe> CollectProbes(const Engine& engine);
// NaN for at::linear and at::mv where only the engine's kernels read a
// matrix (k-major packs in place of it, Q8_0 blocks).
ProbeSums TimeProbes(const Engine& engine, std::vector<Probe>* probes);
void PrintProbes(const std::vector<Probe>& probes, const ProbeSums& sums, const std::vector<double>& step_ms);

}  // namespace pdserve::bench
