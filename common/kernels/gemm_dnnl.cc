#include "common/kernels/gemm_dnnl.h"

#include <ATen/ATen.h>
#if PDSERVE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace pdserve {

namespace {

std::atomic<bool> g_pack_f32{false};

}  // namespace

#if PDSERVE_HAVE_DNNL

namespace {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
using Dt = dnnl::memory::data_type;

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// W^T [K, N] read in place from W [N, K]: rows contiguous (W's row stride
// ldw, strides {1, ldw}), or columns contiguous (W^T row-major with row
// stride ldw, strides {ldw, 1}), as w's strides say.
dnnl::memory::desc InPlaceWeights(const at::Tensor& w) {
  return dnnl::memory::desc(Dims{w.size(1), w.size(0)}, Dt::f32, Dims{w.stride(1), w.stride(0)});
}

// M is rounded up to a multiple of kRowQuantum (x padded with zero rows):
// a primitive costs ~0.5 ms to create, and the routed experts' GEMMs see
// nearly every M up to a chunk's length.
constexpr int64_t kRowQuantum = 8;

struct Gemm {
  dnnl::memory::desc x, w, y;
  dnnl::matmul prim;
};

// The primitive for one shape and weight layout, created on first use. Per
// thread, so nothing is locked. Bounded: past kMaxCached entries the cache
// starts over.
const Gemm& GemmFor(int64_t M, const dnnl::memory::desc& w) {
  constexpr size_t kMaxCached = 2048;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  thread_local std::map<Key, Gemm> cache;
  const dnnl_blocking_desc_t& b = w.data.format_desc.blocking;
  const int64_t K = w.dims()[0], N = w.dims()[1];
  // In-place descs differ by their stride; packed ones by their blocks.
  const Key key{M, K, N, b.strides[0], b.strides[1], b.inner_nblks > 0 ? b.inner_blks[b.inner_nblks - 1] : 0};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCached) cache.clear();
  Gemm g;
  g.x = dnnl::memory::desc(Dims{M, K}, Dt::f32, Tag::ab);
  g.w = w;
  g.y = dnnl::memory::desc(Dims{M, N}, Dt::f32, Tag::ab);
  g.prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(g.x, g.w, g.y), CpuEngine()));
  return cache.emplace(key, std::move(g)).first->second;
}

// The blocked layout oneDNN's kernel wants for an fp32 W^T [K, N] (the same
// for every M on the CPUs measured), or W's own layout where it wants that;
// null where oneDNN has no kernel. Asked once per shape (a primitive
// descriptor each time): the memory estimate, the packs at load and the
// widening GEMM share the answers, for the process's life (a model has a
// handful of shapes).
const dnnl::memory::desc* PreferredWeights(int64_t K, int64_t N) {
  static std::mutex mu;
  static auto* layouts = new std::map<std::pair<int64_t, int64_t>, std::optional<dnnl::memory::desc>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = layouts->find({K, N});
  if (it == layouts->end()) {
    std::optional<dnnl::memory::desc> desc;
    try {
      const dnnl::memory::desc any(Dims{K, N}, Dt::f32, Tag::any);
      const dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(dnnl::memory::desc(Dims{64, K}, Dt::f32, Tag::ab), any,
                             dnnl::memory::desc(Dims{64, N}, Dt::f32, Tag::ab)),
          CpuEngine());
      desc = pd.weights_desc();
    } catch (const dnnl::error&) {
    }
    it = layouts->emplace(std::make_pair(K, N), std::move(desc)).first;
  }
  return it->second.has_value() ? &*it->second : nullptr;  // map nodes stay put
}

}  // namespace

int64_t PackedF32Bytes(int64_t N, int64_t K) {
  const int64_t plain = 4 * N * K;
  if (N <= 0 || K <= 0) return 0;
  const dnnl::memory::desc* packed = PreferredWeights(K, N);
  return packed == nullptr ? plain : std::max<int64_t>(plain, static_cast<int64_t>(packed->get_size()));
}

struct PackedF32Weights::Impl {
  struct Pack {
    at::ScalarType type;  // of the weight packed: fp32, or bf16 (widened)
    int64_t N, K, ldw;
    dnnl::memory::desc desc;
    at::Tensor storage;  // desc.get_size() bytes
  };
  std::unordered_map<const void*, Pack> packs;
  int64_t bytes = 0;

  const Pack* Find(const at::Tensor& w) const {
    const auto it = packs.find(w.data_ptr());
    if (it == packs.end()) return nullptr;
    const Pack& p = it->second;
    const bool same = p.type == w.scalar_type() && p.N == w.size(0) && p.K == w.size(1) && p.ldw == w.stride(0);
    return same ? &p : nullptr;
  }
};

PackedF32Weights::PackedF32Weights() : impl_(std::make_unique<Impl>()) {}
PackedF32Weights::~PackedF32Weights() = default;
int64_t PackedF32Weights::bytes() const { return impl_->bytes; }
int64_t PackedF32Weights::count() const { return static_cast<int64_t>(impl_->packs.size()); }

bool PackedF32Weights::Add(const at::Tensor& w) {
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  if (w.dim() != 2 || (w.scalar_type() != at::kFloat && !bf16) || w.stride(1) != 1 || w.numel() == 0) return false;
  const int64_t N = w.size(0), K = w.size(1), ldw = w.stride(0);
  try {
    // The Linear*Dnnl functions fall back to W if a shape refuses the packed
    // layout.
    const dnnl::memory::desc* preferred = PreferredWeights(K, N);
    if (preferred == nullptr) return false;
    const dnnl::memory::desc& packed = *preferred;
    const dnnl::memory::desc in_place = InPlaceWeights(w);
    if (packed == in_place || packed.data.format_desc.blocking.inner_nblks == 0) return false;
    Impl::Pack p{w.scalar_type(), N, K, ldw, packed, at::empty({static_cast<int64_t>(packed.get_size())}, at::kByte)};
    dnnl::stream stream(CpuEngine());
    // bf16 is widened exactly to fp32 by the same reorder that packs.
    dnnl::memory src(bf16 ? dnnl::memory::desc(Dims{K, N}, Dt::bf16, Dims{1, ldw}) : in_place, CpuEngine(),
                     w.data_ptr());
    dnnl::memory dst(packed, CpuEngine(), p.storage.data_ptr());
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    impl_->bytes += p.storage.numel();
    impl_->packs.insert_or_assign(w.data_ptr(), std::move(p));
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

namespace {

// y [rows, N] = x W^T with W^T described by `wd` at `wp`; throws dnnl::error
// where oneDNN refuses.
at::Tensor RunGemm(const at::Tensor& x, const dnnl::memory::desc& wd, void* wp) {
  const int64_t rows = x.size(0), K = x.size(1), N = wd.dims()[1];
  const int64_t M = (rows + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  at::Tensor xc = x.contiguous();
  if (M != rows) xc = at::cat({xc, at::zeros({M - rows, K}, at::kFloat)}, 0);
  at::Tensor y = at::empty({M, N}, at::kFloat);
  const Gemm& g = GemmFor(M, wd);
  dnnl::engine& engine = CpuEngine();
  dnnl::stream stream(engine);
  g.prim.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(g.x, engine, xc.data_ptr<float>())},
                          {DNNL_ARG_WEIGHTS, dnnl::memory(g.w, engine, wp)},
                          {DNNL_ARG_DST, dnnl::memory(g.y, engine, y.data_ptr<float>())}});
  stream.wait();
  return M == rows ? y : y.narrow(0, 0, rows);  // the first rows of a contiguous tensor
}

// x [M, K] and W [N, K] of these types; W's rows contiguous, or (fp32)
// its columns (W^T row-major, as LinearBf16KMajorWidened passes it).
bool TakesShapes(const at::Tensor& x, const at::Tensor& w, at::ScalarType w_type) {
  const bool layout = w.stride(1) == 1 || (w_type == at::kFloat && w.stride(0) == 1);
  return x.dim() == 2 && w.dim() == 2 && x.scalar_type() == at::kFloat && w.scalar_type() == w_type &&
         x.size(1) == w.size(1) && layout && x.size(0) > 0 && w.size(0) > 0;
}

// y from W's pack where one is in scope and this M takes it; else undefined.
at::Tensor GemmWithScopedPack(const at::Tensor& x, const at::Tensor& w) {
  const PackedF32Weights* scoped = ScopedPackedF32::Current();
  const PackedF32Weights::Impl::Pack* pack = scoped ? scoped->impl().Find(w) : nullptr;
  if (pack == nullptr) return {};
  try {
    return RunGemm(x, pack->desc, pack->storage.data_ptr());
  } catch (const dnnl::error&) {
    return {};  // this M refuses the packed layout: the caller's path without it
  }
}

}  // namespace

at::Tensor LinearF32Dnnl(const at::Tensor& x, const at::Tensor& w) {
  if (!TakesShapes(x, w, at::kFloat)) return {};
  if (at::Tensor y = GemmWithScopedPack(x, w); y.defined()) return y;
  try {
    return RunGemm(x, InPlaceWeights(w), const_cast<float*>(w.data_ptr<float>()));
  } catch (const dnnl::error&) {
    return {};  // no kernel for this shape on this CPU: the caller's fallback
  }
}

at::Tensor LinearBf16WidenedDnnl(const at::Tensor& x, const at::Tensor& w) {
  if (!TakesShapes(x, w, at::kBFloat16)) return {};
  if (at::Tensor y = GemmWithScopedPack(x, w); y.defined()) return y;
  const int64_t K = w.size(1), N = w.size(0);
  try {
    // The preferred layout, and one buffer per thread for W.
    const dnnl::memory::desc* preferred = PreferredWeights(K, N);
    if (preferred == nullptr) return {};
    const dnnl::memory::desc& packed = *preferred;
    thread_local at::Tensor buffer;
    const int64_t bytes = static_cast<int64_t>(packed.get_size());
    if (!buffer.defined() || buffer.numel() < bytes) buffer = at::empty({bytes}, at::kByte);
    // Widened (exactly) and packed in one pass: a reorder from bf16 W^T in place.
    dnnl::engine& engine = CpuEngine();
    dnnl::stream stream(engine);
    dnnl::memory src(dnnl::memory::desc(Dims{K, N}, Dt::bf16, Dims{1, w.stride(0)}), engine, w.data_ptr());
    dnnl::memory dst(packed, engine, buffer.data_ptr());
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    return RunGemm(x, packed, buffer.data_ptr());
  } catch (const dnnl::error&) {
    return {};
  }
}

at::Tensor LinearKMajorDnnl(const at::Tensor& x, const uint16_t* P, int64_t N, int64_t K, int64_t group) {
  if (x.dim() != 2 || x.scalar_type() != at::kFloat || x.size(1) != K || x.size(0) == 0) return {};
  try {
    const dnnl::memory::desc* preferred = PreferredWeights(K, N);
    if (preferred == nullptr) return {};
    // W^T [K, N] in blocks A x B (inner: k then n), blocks ordered n-block
    // then k-block with no padding: element (k, n) at (n / B) K B + k B + n % B.
    const dnnl_blocking_desc_t& b = preferred->data.format_desc.blocking;
    if (preferred->data.format_kind != dnnl_blocked || b.inner_nblks != 2 || b.inner_idxs[0] != 0 ||
        b.inner_idxs[1] != 1) {
      return {};
    }
    const int64_t A = b.inner_blks[0], B = b.inner_blks[1];
    if (B % group != 0 || K % A != 0 || N % B != 0 || b.strides[0] != A * B || b.strides[1] != K * B) return {};
    // Both layouts as one 4-D strided shape [N / B, K, B / group, group]:
    // the pack's groups are k-major runs of `group` outputs.
    const Dims dims{N / B, K, B / group, group};
    const dnnl::memory::desc src(dims, Dt::bf16, Dims{B * K, group, K * group, 1});
    const dnnl::memory::desc dst(dims, Dt::f32, Dims{K * B, B, group, 1});
    thread_local at::Tensor buffer;
    const int64_t bytes = static_cast<int64_t>(preferred->get_size());
    if (!buffer.defined() || buffer.numel() < bytes) buffer = at::empty({bytes}, at::kByte);
    dnnl::engine& engine = CpuEngine();
    dnnl::stream stream(engine);
    dnnl::memory s(src, engine, const_cast<uint16_t*>(P));
    dnnl::memory d(dst, engine, buffer.data_ptr());
    dnnl::reorder(s, d).execute(stream, s, d);
    stream.wait();
    return RunGemm(x, *preferred, buffer.data_ptr());
  } catch (const dnnl::error&) {
    return {};
  }
}

bool DnnlGemmBuilt() { return true; }

#else  // built without oneDNN (the GPU image): LinearF32 is at::linear

struct PackedF32Weights::Impl {};
PackedF32Weights::PackedF32Weights() : impl_(std::make_unique<Impl>()) {}
PackedF32Weights::~PackedF32Weights() = default;
int64_t PackedF32Weights::bytes() const { return 0; }
int64_t PackedF32Weights::count() const { return 0; }
bool PackedF32Weights::Add(const at::Tensor&) { return false; }
at::Tensor LinearF32Dnnl(const at::Tensor&, const at::Tensor&) { return {}; }
at::Tensor LinearBf16WidenedDnnl(const at::Tensor&, const at::Tensor&) { return {}; }
at::Tensor LinearKMajorDnnl(const at::Tensor&, const uint16_t*, int64_t, int64_t, int64_t) { return {}; }
int64_t PackedF32Bytes(int64_t N, int64_t K) { return N > 0 && K > 0 ? 4 * N * K : 0; }
bool DnnlGemmBuilt() { return false; }

#endif  // PDSERVE_HAVE_DNNL

void SetPackF32Weights(bool on) { g_pack_f32.store(on); }
bool PackF32Weights() { return g_pack_f32.load(); }

bool F32GemmUsesDnnl() {
  static const bool on = [] {
    const char* v = std::getenv("PDSERVE_F32_GEMM");
    return v == nullptr || std::strcmp(v, "openblas") != 0;
  }();
  return on;
}

bool DnnlGemmMayServe(const at::Tensor& x, const at::Tensor& w) {
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  return !needs_grad && F32GemmUsesDnnl();
}

at::Tensor LinearF32(const at::Tensor& x, const at::Tensor& w) {
  if (DnnlGemmMayServe(x, w)) {
    if (at::Tensor y = LinearF32Dnnl(x, w); y.defined()) return y;
  }
  return at::linear(x, w);
}

}  // namespace pdserve
