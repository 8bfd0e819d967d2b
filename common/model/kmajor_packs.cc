#include "common/model/kmajor_packs.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/mman.h>

#include <atomic>
#include <stdexcept>

#include "common/model/gemv_kmajor.h"
#include "common/model/huge_page_arena.h"

namespace pdserve {
namespace {

std::atomic<bool> packs_in_use{true};
std::atomic<bool> keep_row_major{false};

// The pack of one bf16 matrix [N, K] at `w`.
at::Tensor MakePack(const uint16_t* w, int64_t N, int64_t K, HugePageArena* arena) {
  at::Tensor out = at::empty({KMajorElements(N, K)}, at::kShort);
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<int16_t>());
  at::parallel_for(0, KMajorGroups(N), /*grain_size=*/8,
                   [&](int64_t g0, int64_t g1) { PackBf16KMajor(w, N, K, g0, g1, o); });
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
  return w.scalar_type() == at::kBFloat16 && w.is_contiguous() && (w.dim() == 2 || w.dim() == 3) && w.size(-2) > 0 &&
         w.size(-1) > 0;
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
  const int64_t E = w.dim() == 3 ? w.size(0) : 1, N = w.size(-2), K = w.size(-1);
  const auto* base = reinterpret_cast<const uint16_t*>(w.data_ptr());
  for (int64_t e = 0; e < E; ++e) {
    at::Tensor p = MakePack(base + e * N * K, N, K, arena);
    bytes_ += p.numel() * 2;
    packs_[static_cast<const uint16_t*>(key) + e * N * K] = {std::move(p), N, K};
  }
  return true;
}

const uint16_t* KMajorPacks::Find(const void* data, int64_t rows, int64_t cols) const {
  const auto it = packs_.find(data);
  if (it == packs_.end() || it->second.cols != cols || rows > it->second.rows) return nullptr;
  return reinterpret_cast<const uint16_t*>(it->second.data.data_ptr<int16_t>());
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
