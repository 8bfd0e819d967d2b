// KvLayout: the shape of a model's KV cache, all the cache needs to know
// about the model (common/model/cache_layout.h builds it from a
// ModelConfig, so that kv/ never includes model/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pdserve {

struct KvLayout {
  // Per layer: true for a windowed layer (a ring of `window` rows), false
  // for a global one (every row).
  std::vector<bool> windowed;
  int64_t window = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t n_layers() const { return static_cast<int64_t>(windowed.size()); }
  // Rows a layer holds after a prefill of `prompt_len` tokens (what a
  // hand-off carries).
  int64_t PrefillRows(int64_t layer, int64_t prompt_len) const {
    return windowed[layer] ? std::min(prompt_len, window) : prompt_len;
  }
};

}  // namespace pdserve
