// MixedKVCache (docs/model.md, "KV cache and the prefill-to-decode
// hand-off"): a ring of `window` rows for each
// windowed layer and a growing array for each global layer. Stores rotated K
// and V, [rows, n_kv_heads, head_dim], in fp32 or bf16.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "common/kv/handoff_state.h"
#include "common/kv/kv_layout.h"

namespace pdserve {

enum class KvDtype { kF32, kBF16 };

struct KvCacheOptions {
  KvDtype dtype = KvDtype::kF32;
  // Global layers never hold more rows than this (docs/model.md default).
  int64_t max_tokens = 4'000'000;
};

class MixedKVCache {
 public:
  MixedKVCache(const KvLayout& layout, KvCacheOptions options = {});

  // Appends T rows (k, v: [T, n_kv_heads, head_dim], any float dtype).
  // Windowed: T >= window keeps the last `window` rows (head = 0); shorter
  // writes wrap at `head`. Global: grows to max(needed, floor(cap*1.5)+1).
  // Returns ResourceExhausted (nothing changed) past max_tokens, and
  // InvalidArgument for a bad layer or shape.
  absl::Status Append(int64_t layer, const at::Tensor& k, const at::Tensor& v);

  // Append of one row for a decode step, without tensor calls: k and v
  // point at n_kv_heads * head_dim fp32 values each (rounded to nearest
  // even for a bf16 cache, as Append's copy rounds). Same rows, growth and
  // errors as Append(layer, [1, K, d], [1, K, d]).
  absl::Status AppendRow(int64_t layer, const float* k, const float* v);

  // GetUnordered's rows as raw storage (fp32, or bf16 as uint16): valid
  // until the next Append, AppendRow, Reserve or Reset of this cache.
  struct RowsView {
    const void* k = nullptr;
    const void* v = nullptr;
    int64_t rows = 0;
  };
  RowsView UnorderedRows(int64_t layer) const;

  // The seq_len(layer) rows in time order (the ring unrolled; a copy only
  // when it has wrapped). Empty [0, K, d] tensors before the first append.
  std::pair<at::Tensor, at::Tensor> Get(int64_t layer) const;

  // The valid rows in storage order, never a copy. For a decode step, where
  // every cached key is visible and order does not matter.
  std::pair<at::Tensor, at::Tensor> GetUnordered(int64_t layer) const;

  // Ring count for windowed layers, valid length for global ones, 0 before
  // the first append.
  int64_t seq_len(int64_t layer) const;
  // Rows allocated for a layer (window for rings; grows for global layers).
  int64_t capacity(int64_t layer) const;
  // Ring write position (windowed layers only; 0 for global).
  int64_t head(int64_t layer) const { return layers_[layer].head; }

  // Allocates every layer for `tokens` positions up front (rings: window
  // rows; global layers: `tokens` rows), so appends up to that length never
  // reallocate and AllocatedBytes() == BytesFor(tokens). ResourceExhausted
  // past max_tokens.
  absl::Status Reserve(int64_t tokens);

  // AllocatedBytes() of a cache reserved for `tokens` positions: what a
  // decode worker's admission charges a sequence.
  static int64_t BytesFor(const KvLayout& layout, KvDtype dtype, int64_t tokens);

  // Drops every row (keeps nothing allocated).
  void Reset();

  // Bytes allocated across all layers, and bytes holding valid rows.
  int64_t AllocatedBytes() const;
  int64_t UsedBytes() const;

  // The hand-off state after a prefill of `prompt_len` tokens: every global
  // layer's rows and each windowed layer's last min(T, window) rows, in time
  // order. Returns FailedPrecondition when the cache does not hold exactly
  // that (e.g. after decode steps).
  absl::StatusOr<KvHandoffState> Export(int64_t prompt_len) const;

  // Rebuilds a cache from a hand-off state. InvalidArgument (naming the
  // layer and the expected versus found rows/shape) when it does not fit
  // `layout`, and ResourceExhausted past max_tokens.
  // `reserve_tokens` > 0 allocates for that many positions first (Reserve).
  // Each layer's tensors in `state` are released once copied in, so a
  // moved-in state's memory goes as the cache's comes (at 128K: the peak is
  // the cache plus one layer, not two whole copies).
  static absl::StatusOr<MixedKVCache> Import(const KvLayout& layout, KvHandoffState state,
                                             KvCacheOptions options = {}, int64_t reserve_tokens = 0);

  const KvCacheOptions& options() const { return options_; }
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }

 private:
  struct Layer {
    bool windowed = false;
    at::Tensor k, v;  // [capacity, K, d]
    int64_t count = 0;  // valid rows
    int64_t head = 0;   // next ring write slot
  };

  absl::Status CheckRows(int64_t layer, const at::Tensor& k, const at::Tensor& v) const;
  // Allocates a windowed layer's ring of `window` rows on its first write.
  void AllocateRing(Layer& L);
  void AppendWindowed(Layer& L, const at::Tensor& k, const at::Tensor& v);
  absl::Status AppendGlobal(int64_t layer, Layer& L, const at::Tensor& k, const at::Tensor& v);
  // Makes room for `needed` rows of a global layer (growth as Append's);
  // ResourceExhausted past max_tokens, nothing changed.
  absl::Status GrowGlobal(int64_t layer, Layer& L, int64_t needed);

  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t window_;
  KvCacheOptions options_;
  std::vector<Layer> layers_;
};

}  // namespace pdserve
