#include "common/engine/memory_estimate.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/attention.h"
#include "common/kernels/bf16_matmul.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"
#include "common/kernels/gemm_amx.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/prefill_attention.h"
#include "common/model/weights.h"

namespace pdserve {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(int64_t{1} << 30));
  if (b >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / double(int64_t{1} << 20));
  return absl::StrCat(b, " B");
}

// The limit in one cgroup file; nullopt-like (-2) when unreadable.
int64_t ReadCgroupFile(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  if (!f || !(f >> text)) return -2;
  if (text == "max") return -1;
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) return -2;
  return v >= (int64_t{1} << 60) ? -1 : v;  // v1 says "no limit" with ~2^63
}

// Whether prefill widens a bf16 weight [N, K] (per expert slice) to fp32.
bool WidensToF32(Bf16Matmul path, int64_t N, int64_t K) {
  switch (path) {
    case Bf16Matmul::kAmx:
    case Bf16Matmul::kDot: return false;
    case Bf16Matmul::kAmxSplit: return !AmxSplitSupported(1, N, K);
    default: return true;
  }
}

// The matrices Transformer::PackKMajor packs: q|kv, o, each expert's
// gate|up and down, the shared ones, the head. Their packs' bytes, or
// (padded = false) their row-major bf16 bytes, which the packs replace.
template <typename Bytes>
int64_t SumPackedMatrices(const ModelConfig& c, const Bytes& pack) {
  const int64_t D = c.d_model, F = c.expert_hidden, hd = c.head_dim;
  const int64_t expert = pack(2 * F, D) + pack(D, F);
  // gpt-oss: the MXFP4 experts are not packed (they stay in the mapping).
  const int64_t dense_experts = c.family == ModelFamily::kGptOss ? 0 : c.n_experts + c.n_shared_experts;
  const int64_t layer = pack((c.n_heads + 2 * c.n_kv_heads) * hd, D) + pack(D, c.n_heads * hd) +
                        dense_experts * expert;
  return c.n_layers * layer + pack(c.vocab_size, D);
}

int64_t KMajorMatrixBytes(const ModelConfig& c, bool padded) {
  return SumPackedMatrices(c, [padded](int64_t N, int64_t K) { return 2 * (padded ? KMajorElements(N, K) : N * K); });
}

// The same matrices in int8 (those whose K takes Q8_0 blocks): their
// k-major packs' bytes, or (padded = false) their Q8_0 rows'.
int64_t Q8MatrixBytes(const ModelConfig& c, bool padded) {
  return SumPackedMatrices(c, [padded](int64_t N, int64_t K) -> int64_t {
    if (!Q8Quantizable(K)) return 0;
    return padded ? Q8KMajorBytes(N, K) : N * Q8RowBytes(K);
  });
}

// Attention of T query rows against S keys: the fused kernel's fp32 K^T
// and V in whole tiles (any KV dtype) and K's copy on the way to its
// tile-major layout, three arrays; where it does not take the shape,
// BlockedAttendWithSinks' ATen form: one block of query rows' scores in
// place, with its boolean mask and that mask's negation, and bf16 K/V
// widened to fp32 once.
int64_t AttentionWorkspaceBytes(const ModelConfig& c, KvDtype kv_dtype, int64_t T, int64_t S) {
  if (PrefillAttnSupported({c.n_heads, c.n_kv_heads, c.head_dim, false})) {
    return 4 * 3 * (S + 2 * kPrefillKeyTile) * c.n_kv_heads * c.head_dim;
  }
  const int64_t rows = std::min(T, kAttentionBlockRows);
  const int64_t widened_kv = kv_dtype == KvDtype::kBF16 ? 4 * 2 * S * c.n_kv_heads * c.head_dim : 0;
  return 4 * rows * c.n_heads * S + 2 * rows * S + widened_kv;
}

}  // namespace

MemoryEstimate EstimateMemory(const ModelConfig& c, WeightsDtype weights_dtype, KvDtype kv_dtype,
                              int64_t kv_budget_bytes, int64_t prefill_chunk, Bf16Matmul bf16_matmul,
                              bool packed_f32) {
  MemoryEstimate e;
  const bool q8_packs = weights_dtype == WeightsDtype::kInt8 && Q8PacksKMajor();
  ModelWeights shapes;
  shapes.config = c;
  int64_t largest_buffered = 0, unbuffered = 0;
  // gpt-oss in bf16 (as published) loaded in bf16: embedding, head, q and o
  // are views of the checkpoint's mapping (gptoss_weights.h), shared, never
  // packed; the head multiplies only the last rows (the row kernels).
  const bool gptoss_mapped = c.family == ModelFamily::kGptOss && weights_dtype == WeightsDtype::kBF16;
  const auto is_mapped = [&](const std::string& name) {
    const auto ends = [&](const char* s) { return absl::EndsWith(name, s); };
    return gptoss_mapped && (name == "embed.weight" || name == "head.weight" || ends(".attn.q_proj.weight") ||
                             ends(".attn.o_proj.weight"));
  };
  for (const NamedTensor& nt : NamedTensors(&shapes)) {
    const int64_t n = Numel(nt.shape);
    if (packed_f32 && nt.is_matmul_weight && nt.name.rfind("blocks.", 0) == 0) {
      // [N, K] per expert slice, in the packed layout.
      const int64_t K = nt.shape.back(), N = nt.shape[nt.shape.size() - 2];
      const int64_t slices = nt.shape.size() == 3 ? nt.shape[0] : 1;
      e.packed_f32_bytes += slices * PackedF32Bytes(N, K);
    }
    if (weights_dtype == WeightsDtype::kInt8 && nt.is_matmul_weight && Q8Quantizable(nt.shape.back())) {
      const int64_t cols = nt.shape.back();
      e.weights_int8_bytes += n / cols * Q8RowBytes(cols);
      if (q8_packs) continue;  // the packs' kernel takes any rows: nothing is widened
      // Prefill widens W to fp32 (LinearQ8): into the per-thread buffer, or
      // past it (the head) into a fresh copy. Experts one slice at a time.
      const int64_t slice = nt.shape.size() == 3 ? n / nt.shape[0] : n;
      if (slice <= kMaxWidenBuffered) largest_buffered = std::max(largest_buffered, 4 * slice);
      else unbuffered = std::max(unbuffered, 4 * slice);
    } else if (weights_dtype == WeightsDtype::kBF16 && nt.is_matmul_weight) {
      const bool mapped = is_mapped(nt.name);
      (mapped ? e.weights_mapped_bytes : e.weights_bf16_bytes) += 2 * n;
      if (mapped && nt.shape[0] == c.vocab_size) continue;  // a lookup, and the last rows' logits
      // Experts are multiplied one [F, D] slice at a time.
      const int64_t slice = nt.shape.size() == 3 ? n / nt.shape[0] : n;
      const int64_t cols = nt.shape.back();
      if (!WidensToF32(bf16_matmul, slice / cols, cols)) continue;
      // The buffer holds W in oneDNN's packed layout (gemm_dnnl.h), or under
      // kmajor W^T with N padded to k-major groups (LinearBf16KMajorWidened).
      const int64_t rows = slice / cols;
      const int64_t bytes = bf16_matmul == Bf16Matmul::kKMajor ? 4 * KMajorElements(rows, cols)
                                                                : PackedF32Bytes(rows, cols);
      if (slice <= kMaxWidenBuffered) largest_buffered = std::max(largest_buffered, bytes);
      else unbuffered = std::max(unbuffered, bytes);
    } else {
      e.weights_f32_bytes += 4 * n;
    }
  }
  if (weights_dtype == WeightsDtype::kBF16 && PacksKMajor(bf16_matmul) && !gptoss_mapped) {
    e.kmajor_bytes = KMajorMatrixBytes(c, /*padded=*/true);
    // The packs take the row-major matrices' place (kmajor_packs.h).
    if (!KMajorKeepsRowMajor()) e.weights_bf16_bytes -= KMajorMatrixBytes(c, /*padded=*/false);
  }
  if (q8_packs) {
    e.kmajor_bytes = Q8MatrixBytes(c, /*padded=*/true);
    if (!KMajorKeepsRowMajor()) e.weights_int8_bytes -= Q8MatrixBytes(c, /*padded=*/false);
  }
  e.weights_mapped_bytes += Mxfp4ExpertBytes(c);
  // One buffer per calling thread (a prefill and a decode worker).
  e.widened_f32_bytes = 2 * largest_buffered + unbuffered;
  e.kv_budget_bytes = std::max<int64_t>(0, kv_budget_bytes);
  // fp32 activations of one chunk (residual, norms, q/k/v, attention out,
  // routed + shared expert hidden) and the last row's logits, twice for
  // temporaries; then attention on the chunk that ends the longest
  // sequence (max_context), against every key of a global layer.
  const int64_t T = std::max<int64_t>(1, prefill_chunk);
  const int64_t per_token = 4 * c.d_model + (2 * c.n_heads + 2 * c.n_kv_heads) * c.head_dim +
                            3 * c.expert_hidden * (c.top_k + c.n_shared_experts) + c.n_experts;
  const int64_t S = std::max(T + c.window, c.max_context);
  e.workspace_bytes = 2 * 4 * (T * per_token + c.vocab_size) + AttentionWorkspaceBytes(c, kv_dtype, T, S);
  return e;
}

absl::StatusOr<MemoryLimit> ReadMemoryLimit(const char* env_value, const std::vector<std::string>& cgroup_files) {
  MemoryLimit limit;
  if (env_value != nullptr && env_value[0] != '\0') {
    limit.source = kMemoryLimitEnv;
    const std::string v = absl::AsciiStrToLower(env_value);
    if (v == "max") return limit;
    if (!absl::SimpleAtoi(v, &limit.bytes) || limit.bytes <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kMemoryLimitEnv, "='", env_value, "': must be a positive byte count or 'max'"));
    }
    return limit;
  }
  for (const std::string& path : cgroup_files) {
    const int64_t v = ReadCgroupFile(path);
    if (v == -2) continue;
    limit.bytes = v;
    limit.source = path;
    return limit;
  }
  return limit;
}

absl::StatusOr<MemoryLimit> ContainerMemoryLimit() {
  std::vector<std::string> files;
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.rfind("0::", 0) == 0 && line.size() > 4) files.push_back("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
  }
  files.push_back("/sys/fs/cgroup/memory.max");
  files.push_back("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  return ReadMemoryLimit(std::getenv(kMemoryLimitEnv), files);
}

std::string DescribeMemory(const MemoryEstimate& e, const MemoryLimit& limit) {
  return absl::StrCat("memory estimate ", Bytes(e.total()), ": weights ", Bytes(e.weights_f32_bytes), " f32 + ",
                      Bytes(e.weights_bf16_bytes), " bf16",
                      e.weights_int8_bytes > 0 ? absl::StrCat(" + ", Bytes(e.weights_int8_bytes), " int8") : "",
                      e.weights_mapped_bytes > 0
                          ? absl::StrCat(" + ", Bytes(e.weights_mapped_bytes), " mapped from the checkpoint (shared between processes)")
                          : "",
                      ", f32 copies of bf16/int8 weights ", Bytes(e.widened_f32_bytes),
                      e.packed_f32_bytes > 0 ? absl::StrCat(", packed f32 weights ", Bytes(e.packed_f32_bytes)) : "",
                      e.kmajor_bytes > 0 ? absl::StrCat(", k-major packs ", Bytes(e.kmajor_bytes)) : "",
                      ", KV budget ", Bytes(e.kv_budget_bytes), ", workspace ", Bytes(e.workspace_bytes), "; limit ",
                      limit.bytes < 0 ? std::string("none") : Bytes(limit.bytes),
                      limit.source.empty() ? "" : absl::StrCat(" (", limit.source, ")"));
}

absl::Status CheckMemoryFits(const MemoryEstimate& e, const MemoryLimit& limit) {
  if (limit.bytes < 0 || e.total() <= limit.bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the model would not fit the memory limit: ", DescribeMemory(e, limit), " (", e.total(), " > ", limit.bytes,
      " bytes). Use --weights-dtype bf16, a smaller --kv-budget-mb or --prefill-chunk, or a larger limit"));
}

}  // namespace pdserve
