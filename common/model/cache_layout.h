// The KV cache's layout (common/kv/kv_layout.h) of a model.
#pragma once

#include "common/kv/kv_layout.h"
#include "common/model/config.h"

namespace pdserve {

inline KvLayout CacheLayout(const ModelConfig& config) {
  KvLayout layout;
  for (int64_t l = 0; l < config.n_layers; ++l) layout.windowed.push_back(ModelConfig::IsWindowed(l));
  layout.window = config.window;
  layout.n_kv_heads = config.n_kv_heads;
  layout.head_dim = config.head_dim;
  return layout;
}

}  // namespace pdserve
