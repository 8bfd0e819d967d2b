#include "common/kv/mixed_kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

at::ScalarType ToScalarType(KvDtype d) { return d == KvDtype::kBF16 ? at::kBFloat16 : at::kFloat; }

}  // namespace

MixedKVCache::MixedKVCache(const KvLayout& layout, KvCacheOptions options)
    : n_kv_heads_(layout.n_kv_heads), head_dim_(layout.head_dim), window_(layout.window), options_(options) {
  layers_.resize(layout.n_layers());
  for (int64_t l = 0; l < layout.n_layers(); ++l) layers_[l].windowed = layout.windowed[l];
}

absl::Status MixedKVCache::CheckRows(int64_t layer, const at::Tensor& k, const at::Tensor& v) const {
  if (layer < 0 || layer >= n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("KV layer ", layer, " out of range [0, ", n_layers(), ")"));
  }
  auto bad_shape = [&](const at::Tensor& t) {
    return t.dim() != 3 || t.size(1) != n_kv_heads_ || t.size(2) != head_dim_;
  };
  if (bad_shape(k) || bad_shape(v) || k.size(0) != v.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat("KV layer ", layer, ": K ", c10::str(k.sizes()), " and V ",
                                                   c10::str(v.sizes()), " must both be [T, ", n_kv_heads_, ", ",
                                                   head_dim_, "]"));
  }
  return absl::OkStatus();
}

absl::Status MixedKVCache::Append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  RETURN_IF_ERROR(CheckRows(layer, k, v));
  Layer& L = layers_[layer];
  if (k.size(0) == 0) return absl::OkStatus();
  if (L.windowed) {
    AppendWindowed(L, k, v);
    return absl::OkStatus();
  }
  return AppendGlobal(layer, L, k, v);
}

void MixedKVCache::AllocateRing(Layer& L) {
  if (L.k.defined()) return;
  L.k = at::empty({window_, n_kv_heads_, head_dim_}, ToScalarType(options_.dtype));
  L.v = at::empty_like(L.k);
}

void MixedKVCache::AppendWindowed(Layer& L, const at::Tensor& k, const at::Tensor& v) {
  AllocateRing(L);
  const int64_t T = k.size(0);
  at::NoGradGuard no_grad;
  if (T >= window_) {
    // Keep the last `window` rows in time order, head = 0.
    L.k.copy_(k.narrow(0, T - window_, window_));
    L.v.copy_(v.narrow(0, T - window_, window_));
    L.head = 0;
    L.count = window_;
    return;
  }
  // Up to two contiguous pieces: [head, window) then [0, rest).
  const int64_t first = std::min(T, window_ - L.head);
  L.k.narrow(0, L.head, first).copy_(k.narrow(0, 0, first));
  L.v.narrow(0, L.head, first).copy_(v.narrow(0, 0, first));
  if (T > first) {
    L.k.narrow(0, 0, T - first).copy_(k.narrow(0, first, T - first));
    L.v.narrow(0, 0, T - first).copy_(v.narrow(0, first, T - first));
  }
  L.head = (L.head + T) % window_;
  L.count = std::min(window_, L.count + T);
}

absl::Status MixedKVCache::GrowGlobal(int64_t layer, Layer& L, int64_t needed) {
  if (needed > options_.max_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache layer ", layer, " would hold ", needed,
                                                     " tokens, above the cap of ", options_.max_tokens));
  }
  const int64_t cap = L.k.defined() ? L.k.size(0) : 0;
  if (needed <= cap) return absl::OkStatus();
  at::NoGradGuard no_grad;
  const int64_t grown = std::min(std::max(needed, cap * 3 / 2 + 1), options_.max_tokens);
  at::Tensor nk = at::empty({grown, n_kv_heads_, head_dim_}, ToScalarType(options_.dtype));
  at::Tensor nv = at::empty_like(nk);
  if (L.count > 0) {
    nk.narrow(0, 0, L.count).copy_(L.k.narrow(0, 0, L.count));
    nv.narrow(0, 0, L.count).copy_(L.v.narrow(0, 0, L.count));
  }
  L.k = nk;
  L.v = nv;
  return absl::OkStatus();
}

absl::Status MixedKVCache::AppendGlobal(int64_t layer, Layer& L, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = k.size(0);
  const int64_t needed = L.count + T;
  RETURN_IF_ERROR(GrowGlobal(layer, L, needed));
  at::NoGradGuard no_grad;
  L.k.narrow(0, L.count, T).copy_(k);
  L.v.narrow(0, L.count, T).copy_(v);
  L.count = needed;
  return absl::OkStatus();
}

namespace {

// One row of `n` fp32 values into cache storage of `dtype` at row `row`.
void WriteRow(const float* src, int64_t n, KvDtype dtype, at::Tensor& dst, int64_t row) {
  if (dtype == KvDtype::kF32) {
    std::memcpy(dst.data_ptr<float>() + row * n, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  // Round to nearest even, as ATen's copy_ rounds; a NaN becomes 0xffff as
  // in that copy (c10::BFloat16's own constructor would give 0x7fc0).
  uint16_t* out = reinterpret_cast<uint16_t*>(dst.data_ptr<c10::BFloat16>()) + row * n;
  for (int64_t i = 0; i < n; ++i) out[i] = std::isnan(src[i]) ? uint16_t{0xffff} : c10::BFloat16(src[i]).x;
}

}  // namespace

absl::Status MixedKVCache::AppendRow(int64_t layer, const float* k, const float* v) {
  if (layer < 0 || layer >= n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("KV layer ", layer, " out of range [0, ", n_layers(), ")"));
  }
  Layer& L = layers_[layer];
  int64_t row = L.count;
  if (L.windowed) {
    AllocateRing(L);
    row = L.head;
  } else {
    RETURN_IF_ERROR(GrowGlobal(layer, L, L.count + 1));
  }
  const int64_t n = n_kv_heads_ * head_dim_;
  WriteRow(k, n, options_.dtype, L.k, row);
  WriteRow(v, n, options_.dtype, L.v, row);
  if (L.windowed) {
    L.head = (L.head + 1) % window_;
    L.count = std::min(window_, L.count + 1);
  } else {
    L.count += 1;
  }
  return absl::OkStatus();
}

MixedKVCache::RowsView MixedKVCache::UnorderedRows(int64_t layer) const {
  const Layer& L = layers_.at(layer);
  if (!L.k.defined()) return {};
  return {L.k.data_ptr(), L.v.data_ptr(), L.count};
}

absl::Status MixedKVCache::Reserve(int64_t tokens) {
  if (tokens > options_.max_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache reservation of ", tokens,
                                                     " tokens is above the cap of ", options_.max_tokens));
  }
  at::NoGradGuard no_grad;
  for (Layer& L : layers_) {
    const int64_t rows = L.windowed ? window_ : tokens;
    const int64_t cap = L.k.defined() ? L.k.size(0) : 0;
    if (rows <= cap) continue;
    at::Tensor nk = at::empty({rows, n_kv_heads_, head_dim_}, ToScalarType(options_.dtype));
    at::Tensor nv = at::empty_like(nk);
    if (L.count > 0) {
      // Rings keep their layout (head stays valid); global rows are a prefix.
      nk.narrow(0, 0, cap).copy_(L.k);
      nv.narrow(0, 0, cap).copy_(L.v);
    }
    L.k = nk;
    L.v = nv;
  }
  return absl::OkStatus();
}

int64_t MixedKVCache::BytesFor(const KvLayout& layout, KvDtype dtype, int64_t tokens) {
  const int64_t row = 2 * layout.n_kv_heads * layout.head_dim * (dtype == KvDtype::kBF16 ? 2 : 4);
  int64_t rows = 0;
  for (int64_t l = 0; l < layout.n_layers(); ++l) rows += layout.windowed[l] ? layout.window : tokens;
  return rows * row;
}

std::pair<at::Tensor, at::Tensor> MixedKVCache::GetUnordered(int64_t layer) const {
  const Layer& L = layers_.at(layer);
  if (!L.k.defined()) {
    at::Tensor e = at::empty({0, n_kv_heads_, head_dim_}, ToScalarType(options_.dtype));
    return {e, e};
  }
  return {L.k.narrow(0, 0, L.count), L.v.narrow(0, 0, L.count)};
}

std::pair<at::Tensor, at::Tensor> MixedKVCache::Get(int64_t layer) const {
  const Layer& L = layers_.at(layer);
  if (!L.windowed || L.count < window_ || L.head == 0) return GetUnordered(layer);
  // Wrapped ring: oldest row sits at `head`.
  const int64_t tail = window_ - L.head;
  return {at::cat({L.k.narrow(0, L.head, tail), L.k.narrow(0, 0, L.head)}),
          at::cat({L.v.narrow(0, L.head, tail), L.v.narrow(0, 0, L.head)})};
}

int64_t MixedKVCache::seq_len(int64_t layer) const { return layers_.at(layer).count; }

int64_t MixedKVCache::capacity(int64_t layer) const {
  const Layer& L = layers_.at(layer);
  return L.k.defined() ? L.k.size(0) : 0;
}

void MixedKVCache::Reset() {
  for (Layer& L : layers_) {
    L.k = at::Tensor();
    L.v = at::Tensor();
    L.count = 0;
    L.head = 0;
  }
}

int64_t MixedKVCache::AllocatedBytes() const {
  int64_t b = 0;
  for (const Layer& L : layers_) {
    if (L.k.defined()) b += L.k.nbytes() + L.v.nbytes();
  }
  return b;
}

int64_t MixedKVCache::UsedBytes() const {
  const int64_t row = 2 * n_kv_heads_ * head_dim_ * (options_.dtype == KvDtype::kBF16 ? 2 : 4);
  int64_t b = 0;
  for (const Layer& L : layers_) b += L.count * row;
  return b;
}

absl::StatusOr<KvHandoffState> MixedKVCache::Export(int64_t prompt_len) const {
  KvHandoffState s;
  s.prompt_len = prompt_len;
  for (int64_t l = 0; l < n_layers(); ++l) {
    const int64_t want = layers_[l].windowed ? std::min(prompt_len, window_) : prompt_len;
    if (seq_len(l) != want) {
      return absl::FailedPreconditionError(absl::StrCat("cannot export layer ", l, ": it holds ", seq_len(l),
                                                        " rows, a prompt of ", prompt_len, " needs ", want));
    }
    auto [k, v] = Get(l);
    s.k.push_back(k.contiguous());
    s.v.push_back(v.contiguous());
  }
  return s;
}

absl::StatusOr<MixedKVCache> MixedKVCache::Import(const KvLayout& layout, KvHandoffState state,
                                                  KvCacheOptions options, int64_t reserve_tokens) {
  MixedKVCache cache(layout, options);
  if (static_cast<int64_t>(state.k.size()) != layout.n_layers() ||
      static_cast<int64_t>(state.v.size()) != layout.n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("hand-off has ", state.k.size(), " K and ", state.v.size(),
                                                   " V layers, the model has ", layout.n_layers()));
  }
  if (state.prompt_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat("hand-off prompt_len ", state.prompt_len, " is negative"));
  }
  if (state.prompt_len > options.max_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat("hand-off of ", state.prompt_len,
                                                     " tokens exceeds the KV cap of ", options.max_tokens));
  }
  if (reserve_tokens > 0) RETURN_IF_ERROR(cache.Reserve(std::max(reserve_tokens, state.prompt_len)));
  for (int64_t l = 0; l < layout.n_layers(); ++l) {
    const int64_t want = layout.PrefillRows(l, state.prompt_len);
    RETURN_IF_ERROR(cache.CheckRows(l, state.k[l], state.v[l]));
    if (state.k[l].size(0) != want) {
      return absl::InvalidArgumentError(absl::StrCat("hand-off layer ", l, " has ", state.k[l].size(0),
                                                     " rows, expected ", want, " for prompt_len ",
                                                     state.prompt_len));
    }
    RETURN_IF_ERROR(cache.Append(l, state.k[l], state.v[l]));
    state.k[l].reset();
    state.v[l].reset();
  }
  return cache;
}

}  // namespace pdserve
