// RoPE with YaRN scaling (docs/model.md, "RoPE with YaRN"): half-split pairs,
// identity pairs on global layers, absolute positions.
//
// Two ways to get cos/sin that give bit-identical numbers, because both call
// Angle(): a cached table for multi-token chunks, and a scalar fast path for
// one-token decode steps that skips the table.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/model/config.h"

namespace pdserve {

class Rope {
 public:
  explicit Rope(const ModelConfig& config);

  int64_t half_dim() const { return half_; }
  double mscale() const { return mscale_; }
  // inv_i of the spec, for pair i (windowed and global share it).
  double inv_freq(int64_t i) const { return inv_freq_[i]; }

  // Scalar path: cos and sin of every pair at `pos`, each `half_dim` floats.
  void Angles(int64_t pos, bool global, float* cos_out, float* sin_out) const;

  // Table path: cos, sin as [n, half_dim] fp32 for positions start..start+n-1.
  // Grows a cached table on demand; thread-safe.
  void Table(int64_t start, int64_t n, bool global, at::Tensor* cos, at::Tensor* sin) const;

  // cos, sin [positions.size(), half_dim] by the scalar path.
  void ForPositions(const std::vector<int64_t>& positions, bool global, at::Tensor* cos, at::Tensor* sin) const;

  // Rotates x [N, heads, d] with cos/sin [N, half_dim]. Differentiable.
  static at::Tensor Apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  int64_t half_;
  int64_t identity_pairs_;
  double mscale_;
  std::vector<double> inv_freq_;

  mutable std::mutex mu_;
  mutable at::Tensor table_cos_[2], table_sin_[2];  // [0] windowed, [1] global
};

}  // namespace pdserve
