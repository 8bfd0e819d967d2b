#include "common/kernels/kmajor_packs.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/mman.h>

#include <atomic>
#include <stdexcept>

#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"
#include "common/model/huge_page_arena.h"
#include "common/kernels/linear_int8.h"

namespace pdserve {
namespace {

std::atomic<bool> packs_in_use{true};
std::atomic<bool> keep_row_major{false};

// The pack of one bf16 matrix [N, K] at `w`, or (q8) of one Q8_0 matrix
// of N rows of K values.
at::Tensor MakePack(const void* w, int64_t N, int64_t K, bool q8, HugePageArena* arena) {
  at::Tensor out = q8 ? at::empty({Q8KMajorBytes(N, K)}, at::kByte) : at::empty({KMajorElements(N, K)}, at::kShort);
  at::parallel_for(0, KMajorGroups(N), /*grain_size=*/8, [&](int64_t g0, int64_t g1) {
    if (q8) {
      PackQ8KMajor(static_cast<const uint8_t*>(w), N, K, g0, g1, out.data_ptr<uint8_t>());
    } else {
      PackBf16KMajor(static_cast<const uint16_t*>(w), N, K, g0, g1,
                     reinterpret_cast<uint16_t*>(out.data_ptr<int16_t>()));
    }
  });
  return arena != nullptr ? PlaceOnHugePages(arena, out) : out;
}

// A tensor shaped like contiguous w over `w`'s bytes of address space
// reserved with no access and no memory behind it (MAP_NORESERVE): it costs
// page-table entries only once touched, and a touch faults.
at::Tensor StandIn(const at::Tensor& w) {
  const size_t bytes = static_cast<size_t>(w.numel() * w.element_size());
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("k-major packs: cannot reserve address space for a stand-in");
  return at::from_blob(
      p, w.sizes(), [bytes](void* q) { munmap(q, bytes); }, w.options().requires_grad(false));
}

bool Packable(const at::Tensor& w) {
  const bool q8 = IsQ8(w);
  if (!(w.scalar_type() == at::kBFloat16 || (q8 && GemvQ8Available()))) return false;
  return w.is_contiguous() && (w.dim() == 2 || w.dim() == 3) && w.size(-2) > 0 && w.size(-1) > 0 &&
         (!q8 || w.size(-1) % kQ8BlockBytes == 0);
}

}  // namespace

bool KMajorPacks::Add(const at::Tensor& w, HugePageArena* arena) { return AddKeyed(w, w.data_ptr(), arena); }

bool KMajorPacks::Take(at::Tensor* w, HugePageArena* arena) {
  if (!Packable(*w)) return false;
  at::Tensor stand_in = StandIn(*w);
  if (!AddKeyed(*w, stand_in.data_ptr(), arena)) return false;
  *w = std::move(stand_in);
  taken_ = true;
  return true;
}

bool KMajorPacks::AddKeyed(const at::Tensor& w, const void* key, HugePageArena* arena) {
  if (!Packable(w)) return false;
  const bool q8 = IsQ8(w);
  const int64_t E = w.dim() == 3 ? w.size(0) : 1, N = w.size(-2), row_bytes = w.size(-1) * w.element_size();
  const int64_t K = q8 ? w.size(-1) / kQ8BlockBytes * kQ8Block : w.size(-1);
  const auto* base = static_cast<const char*>(w.data_ptr());
  for (int64_t e = 0; e < E; ++e) {
    at::Tensor p = MakePack(base + e * N * row_bytes, N, K, q8, arena);
    bytes_ += p.numel() * p.element_size();
    packs_[static_cast<const char*>(key) + e * N * row_bytes] = {std::move(p), N, K, q8};
  }
  return true;
}

const KMajorPacks::Pack* KMajorPacks::Lookup(const void* data, int64_t rows, int64_t cols, bool q8) const {
  const auto it = packs_.find(data);
  if (it == packs_.end() || it->second.q8 != q8 || it->second.cols != cols || rows > it->second.rows) return nullptr;
  return &it->second;
}

const uint16_t* KMajorPacks::Find(const void* data, int64_t rows, int64_t cols) const {
  const Pack* p = Lookup(data, rows, cols, /*q8=*/false);
  return p != nullptr ? reinterpret_cast<const uint16_t*>(p->data.data_ptr<int16_t>()) : nullptr;
}

const uint8_t* KMajorPacks::FindQ8(const void* data, int64_t rows, int64_t cols) const {
  const Pack* p = Lookup(data, rows, cols, /*q8=*/true);
  return p != nullptr ? p->data.data_ptr<uint8_t>() : nullptr;
}

const KMajorPacks* CurrentKMajorPacks() {
  const KMajorPacks* packs = ScopedKMajorPacks::Current();
  if (packs == nullptr || packs->holds_only_copies()) return packs;
  return packs_in_use.load(std::memory_order_relaxed) ? packs : nullptr;
}

void SetKMajorPacksInUse(bool on) { packs_in_use.store(on, std::memory_order_relaxed); }

void SetKMajorKeepsRowMajor(bool on) { keep_row_major.store(on, std::memory_order_relaxed); }

bool KMajorKeepsRowMajor() { return keep_row_major.load(std::memory_order_relaxed); }

}  // namespace pdserve
