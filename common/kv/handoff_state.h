// KvHandoffState: exactly what a prefill worker hands to a decode worker
// (docs/model.md, "KV cache and the prefill-to-decode hand-off"). Plain
// tensors; the wire format lives in common/handoff/.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace pdserve {

struct KvHandoffState {
  int64_t prompt_len = 0;
  // Per layer, rotated K and V [rows, n_kv_heads, head_dim] in time order:
  // rows = prompt_len on global layers, min(prompt_len, window) on windowed.
  std::vector<at::Tensor> k;
  std::vector<at::Tensor> v;

  // Bytes of K and V across all layers (= sum rows * 2 * K * d * elem size).
  int64_t Bytes() const {
    int64_t b = 0;
    for (size_t i = 0; i < k.size(); ++i) b += k[i].nbytes() + v[i].nbytes();
    return b;
  }
};

}  // namespace pdserve
