#include "common/kernels/linear_int8.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"
#include "common/kernels/gemv_tiles.h"
#include "common/kernels/kmajor_packs.h"

namespace pdserve {
namespace {

int64_t KOf(const at::Tensor& q) { return q.size(-1) / kQ8BlockBytes * kQ8Block; }

// One row of K fp32 values into Q8RowBytes(K) bytes.
void QuantizeRow(const float* w, int64_t K, uint8_t* out) {
  for (int64_t b = 0; b < K / kQ8Block; ++b) {
    const float* v = w + b * kQ8Block;
    float amax = 0;
    for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
    const c10::Half d(amax / 127.0f);  // q is rounded against the stored scale
    const float df = static_cast<float>(d);
    const float id = df > 0 ? 1.0f / df : 0.0f;
    uint8_t* blk = out + b * kQ8BlockBytes;
    std::memcpy(blk, &d, 2);
    for (int64_t i = 0; i < kQ8Block; ++i) {
      const float q = std::clamp(std::nearbyint(v[i] * id), -127.0f, 127.0f);
      blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

void DequantizeRow(const uint8_t* in, int64_t K, float* out) {
  for (int64_t b = 0; b < K / kQ8Block; ++b) {
    const uint8_t* blk = in + b * kQ8BlockBytes;
    c10::Half d;
    std::memcpy(&d, blk, 2);
    const float df = static_cast<float>(d);
    for (int64_t i = 0; i < kQ8Block; ++i) out[b * kQ8Block + i] = df * static_cast<int8_t>(blk[2 + i]);
  }
}

// The fp32 values of q into dst (q.numel() / q.size(-1) * K floats).
void DequantizeInto(const at::Tensor& q, float* dst) {
  const at::Tensor qc = q.contiguous();
  const int64_t K = KOf(qc), rows = qc.numel() / qc.size(-1);
  const auto* src = reinterpret_cast<const uint8_t*>(qc.data_ptr<int8_t>());
  at::parallel_for(0, rows, /*grain_size=*/64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) DequantizeRow(src + r * Q8RowBytes(K), K, dst + r * K);
  });
}

// The k-major pack of a 2-D Q8_0 w in scope on this thread, or nullptr.
const uint8_t* PackOf(const at::Tensor& w) {
  const KMajorPacks* packs = CurrentKMajorPacks();
  return packs != nullptr && w.dim() == 2 ? packs->FindQ8(w.data_ptr(), w.size(0), KOf(w)) : nullptr;
}

// The kernel PDSERVE_Q8_KERNEL names (read once), else auto's: the dot
// kernel where the CPU has AVX2 + FMA + F16C (with k-major packs, in its
// AVX-512 VNNI or AVX2 build), FMA elsewhere (no decode kernels there).
Q8Kernel EnvOrAutoQ8Kernel() {
  static const Q8Kernel kernel = [] {
    const char* v = std::getenv("PDSERVE_Q8_KERNEL");
    const absl::StatusOr<Q8Kernel> named = ParseQ8Kernel(v == nullptr ? "auto" : v);
    if (named.ok() && *named != Q8Kernel::kDefault) return *named;
    return GemvQ8Available() ? Q8Kernel::kDot : Q8Kernel::kFma;
  }();
  return kernel;
}

// SetQ8Kernel's choice; kDefault until set (or set to auto).
std::atomic<Q8Kernel> g_q8_kernel{Q8Kernel::kDefault};

bool DefaultIsDot() {
  const Q8Kernel set = g_q8_kernel.load();
  return (set == Q8Kernel::kDefault ? EnvOrAutoQ8Kernel() : set) == Q8Kernel::kDot;
}

bool UsesDot(Q8Kernel kernel) { return kernel == Q8Kernel::kDot || (kernel == Q8Kernel::kDefault && DefaultIsDot()); }

// x [M, K] as the dot kernel sees it: each block of 32 quantized
// (QuantizeRowsQ8) and scaled back to fp32.
at::Tensor RoundTripQ8(const at::Tensor& x) {
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), nb = K / kQ8Block;
  at::Tensor xq = at::empty({M, K}, at::kChar), xs = at::empty({M, nb}, at::kFloat);
  QuantizeRowsQ8(xc.data_ptr<float>(), M, K, xq.data_ptr<int8_t>(), xs.data_ptr<float>());
  return (xq.to(at::kFloat).view({M, nb, kQ8Block}) * xs.unsqueeze(-1)).view({M, K});
}

// Decode-sized x: x quantized once (dot kernel), then each weight row
// streamed once per 4 rows of x, tiled as Linear does (gemv_tiles.h). From
// a k-major pack, any x: every row in each call (the kernel blocks them)
// over chunks of whole groups.
at::Tensor GemvLinear(const at::Tensor& x, const at::Tensor& w, const uint8_t* pack, Q8Kernel kernel) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0), nb = K / kQ8Block;
  const at::Tensor xc = x.contiguous();
  const bool fma = pack == nullptr && !UsesDot(kernel);
  at::Tensor xq = at::empty({fma ? 0 : M, K}, at::kChar), xs = at::empty({fma ? 0 : M, nb}, at::kFloat);
  if (!fma) QuantizeRowsQ8(xc.data_ptr<float>(), M, K, xq.data_ptr<int8_t>(), xs.data_ptr<float>());
  const float* xp = xc.data_ptr<float>();
  at::Tensor y = at::empty({M, N}, at::kFloat);
  const int8_t* xqp = xq.data_ptr<int8_t>();
  const float* xsp = xs.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (pack != nullptr) {
    ForEachGemvTile(
        M, N, Q8RowBytes(K),
        [&](int64_t, int64_t, int64_t t0, int64_t t1) { GemvQ8KMajorDot(xqp, xsp, M, K, pack, N, t0, t1, yp, N); },
        std::max<int64_t>(M, 1), kKMajorGroup);
    return y;
  }
  const auto* wp = static_cast<const uint8_t*>(w.data_ptr());
  ForEachGemvTile(M, N, Q8RowBytes(K), [&](int64_t m, int64_t rows, int64_t t0, int64_t t1) {
    if (fma) {
      GemvQ8Fma(xp + m * K, rows, K, wp, t0, t1, yp + m * N, N);
    } else {
      GemvQ8Dot(xqp + m * K, xsp + m * nb, rows, K, wp, t0, t1, yp + m * N, N);
    }
  });
  return y;
}

}  // namespace

bool IsQ8(const at::Tensor& w) { return w.defined() && w.scalar_type() == at::kChar; }

absl::StatusOr<Q8Kernel> ParseQ8Kernel(const std::string& name) {
  if (name == "auto") return Q8Kernel::kDefault;
  if (name == "dot") return Q8Kernel::kDot;
  if (name == "fma") return Q8Kernel::kFma;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown int8 kernel \"", name.substr(0, 32), "\" (want auto, dot or fma)"));
}

const char* Q8KernelName(Q8Kernel kernel) {
  switch (kernel) {
    case Q8Kernel::kDot: return "dot";
    case Q8Kernel::kFma: return "fma";
    default: return "auto";
  }
}

void SetQ8Kernel(Q8Kernel kernel) { g_q8_kernel.store(kernel); }

bool Q8KernelIsDot(Q8Kernel kernel) { return UsesDot(kernel); }

bool Q8PacksKMajor() {
  static const bool allowed = [] {
    const char* v = std::getenv("PDSERVE_Q8_KMAJOR");
    return GemvQ8Available() && !(v != nullptr && std::string(v) == "0");
  }();
  return allowed && DefaultIsDot();
}

bool Q8Quantizable(int64_t K) { return K > 0 && K % kQ8Block == 0; }

at::Tensor QuantizeQ8(const at::Tensor& w) {
  const int64_t K = w.size(-1), rows = w.numel() / K;
  TORCH_CHECK(Q8Quantizable(K), "Q8_0 needs a last dimension divisible by 32, got ", K);
  const at::Tensor wf = w.to(at::kFloat).contiguous();
  std::vector<int64_t> shape = w.sizes().vec();
  shape.back() = Q8RowBytes(K);
  at::Tensor q = at::empty(shape, at::kChar);
  const float* src = wf.data_ptr<float>();
  auto* dst = reinterpret_cast<uint8_t*>(q.data_ptr<int8_t>());
  at::parallel_for(0, rows, /*grain_size=*/64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) QuantizeRow(src + r * K, K, dst + r * Q8RowBytes(K));
  });
  return q;
}

at::Tensor DequantizeQ8(const at::Tensor& q) {
  std::vector<int64_t> shape = q.sizes().vec();
  shape.back() = KOf(q);
  at::Tensor out = at::empty(shape, at::kFloat);
  DequantizeInto(q, out.data_ptr<float>());
  return out;
}

at::Tensor LinearQ8(const at::Tensor& x, const at::Tensor& w, Q8Kernel kernel) {
  TORCH_CHECK(w.dim() == 2 && x.dim() == 2 && x.size(1) == KOf(w), "LinearQ8: x ", x.sizes(), " against Q8_0 ",
              w.sizes());
  at::Tensor xf = x.to(at::kFloat);
  // From a pack, any number of rows through its kernel (no widening; each
  // row's bits the same in prefill and decode, whatever the batch).
  const uint8_t* pack = PackOf(w);
  if (pack != nullptr || (x.size(0) <= kGemvMaxBatchRows && w.is_contiguous() && GemvQ8Available())) {
    return GemvLinear(xf, w, pack, kernel);
  }
  // With the dot kernel, prefill sees x quantized as decode does, so a
  // cached decode and a no-cache forward agree as for the FMA kernel.
  if (UsesDot(kernel)) xf = RoundTripQ8(xf);
  // Prefill: widened once per call into a per-thread buffer (a fresh
  // tensor per call costs page faults and zeroing, as for bf16 in Linear);
  // the LM head (past 64 MB in fp32) is widened into a fresh one.
  constexpr int64_t kMaxBuffered = int64_t{16} << 20;  // elements
  const int64_t N = w.size(0), K = x.size(1);
  if (N * K > kMaxBuffered) return at::linear(xf, DequantizeQ8(w));
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < N * K) buffer = at::empty({N * K}, at::kFloat);
  at::Tensor wf = buffer.narrow(0, 0, N * K).view({N, K});
  DequantizeInto(w, wf.data_ptr<float>());
  return at::linear(xf, wf);
}

at::Tensor EmbedRowsQ8(const at::Tensor& embed, const at::Tensor& ids) {
  const uint8_t* pack = PackOf(embed);
  if (pack == nullptr) return DequantizeQ8(embed.index_select(0, ids));
  const at::Tensor ic = ids.to(at::kLong).contiguous();
  const int64_t N = ic.numel(), D = KOf(embed);
  at::Tensor out = at::empty({N, D}, at::kFloat);
  const int64_t* ip = ic.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n) {
    TORCH_CHECK(ip[n] >= 0 && ip[n] < embed.size(0), "EmbedRowsQ8: id ", ip[n], " outside [0, ", embed.size(0), ")");
    DequantizeQ8KMajorRow(pack, D, ip[n], out.data_ptr<float>() + n * D);
  }
  return out;
}

}  // namespace pdserve
