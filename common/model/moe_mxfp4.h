// The routed experts of a gpt-oss layer with MXFP4 weights (docs/model.md,
// "gpt-oss checkpoints"), read from the checkpoint's mapping as stored:
//
//   Mxfp4Experts        one layer's E experts: gate|up and down as
//                       Mxfp4Matrix views (mxfp4.h), their fp32 biases
//   ClampedSwigluRow    the expert activation, one row
//   MoeMxfp4            h [N, D] -> sum over each row's top_k experts of
//                       gate * (W_d act(W_gu h + b_gu) + b_d)
//   SetMoeMxfp4Kernel   --mxfp4-kernel fma|dot, process-wide
//
// For each expert that any row was routed to: its rows of h, gate|up plus
// bias (rows interleaved: row 2j is gate j, 2j+1 up j), the clamped SwiGLU,
// down plus bias; then each row's outputs multiplied by their gates and
// added in slot order. The kernels' summation order does not depend on how
// many rows share a call, so a row's bits do not depend on its batch or on
// which other rows chose the same expert.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kernels/mxfp4.h"

namespace pdserve {

struct Mxfp4Experts {
  int64_t d_model = 0;        // D: gate|up's K, down's N
  int64_t hidden = 0;         // F: down's K; gate|up has 2F rows
  double swiglu_limit = 7.0;  // gate <= limit, |up| <= limit
  std::vector<Mxfp4Matrix> gate_up;  // E x [2F, D], bias [2F] each
  std::vector<Mxfp4Matrix> down;     // E x [D, F], bias [D] each

  int64_t n_experts() const { return static_cast<int64_t>(gate_up.size()); }
};

// act[j] = min(g, limit) * sigmoid(1.702 * min(g, limit)) * (clamp(u, -limit, limit) + 1)
// with g = gu[2j], u = gu[2j + 1], j < F; in fp32, sigmoid as 1 / (1 + exp(-x)).
void ClampedSwigluRow(const float* gu, int64_t F, float limit, float* act);

enum class Mxfp4KernelChoice { kFma, kDot };
// fma (default): x stays fp32 (GemvMxfp4Fma); dot: x quantized to int8 per
// block of 32, as llama.cpp multiplies MXFP4 (GemvMxfp4Dot).
absl::StatusOr<Mxfp4KernelChoice> ParseMxfp4Kernel(const std::string& name);
void SetMoeMxfp4Kernel(Mxfp4KernelChoice kernel);
Mxfp4KernelChoice GetMoeMxfp4Kernel();

// out [N, D] = for each row n: sum over slots s < top_k, in order, of
// gates[n * top_k + s] * y_s, y_s the output of expert idx[n * top_k + s]
// (each product rounded to fp32, then added). h: [N, D] fp32, row-major.
// Every idx must be in [0, E). Parallel over experts and tiles of weight
// rows (OpenMP through at::parallel_for).
void MoeMxfp4(const Mxfp4Experts& experts, const float* h, int64_t N, const int64_t* idx, const float* gates,
              int64_t top_k, float* out);

}  // namespace pdserve
