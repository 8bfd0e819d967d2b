#include "common/model/kmajor_packs.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>

#include "common/model/gemv_kmajor.h"
#include "common/model/huge_page_arena.h"

namespace pdserve {
namespace {

thread_local const KMajorPacks* current_packs = nullptr;
std::atomic<bool> packs_in_use{true};

// The pack of one bf16 matrix [N, K] at `w`.
at::Tensor MakePack(const uint16_t* w, int64_t N, int64_t K, HugePageArena* arena) {
  at::Tensor out = at::empty({KMajorElements(N, K)}, at::kShort);
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<int16_t>());
  at::parallel_for(0, KMajorGroups(N), /*grain_size=*/8,
                   [&](int64_t g0, int64_t g1) { PackBf16KMajor(w, N, K, g0, g1, o); });
  return arena != nullptr ? PlaceOnHugePages(arena, out) : out;
}

}  // namespace

bool KMajorPacks::Add(const at::Tensor& w, HugePageArena* arena) {
  if (w.scalar_type() != at::kBFloat16 || !w.is_contiguous() || (w.dim() != 2 && w.dim() != 3)) return false;
  const int64_t E = w.dim() == 3 ? w.size(0) : 1, N = w.size(-2), K = w.size(-1);
  if (N <= 0 || K <= 0) return false;
  const auto* base = reinterpret_cast<const uint16_t*>(w.data_ptr());
  for (int64_t e = 0; e < E; ++e) {
    const uint16_t* m = base + e * N * K;
    at::Tensor p = MakePack(m, N, K, arena);
    bytes_ += p.numel() * 2;
    packs_[m] = {std::move(p), N, K};
  }
  return true;
}

const uint16_t* KMajorPacks::Find(const void* data, int64_t rows, int64_t cols) const {
  const auto it = packs_.find(data);
  if (it == packs_.end() || it->second.cols != cols || rows > it->second.rows) return nullptr;
  return reinterpret_cast<const uint16_t*>(it->second.data.data_ptr<int16_t>());
}

ScopedKMajorPacks::ScopedKMajorPacks(const KMajorPacks* packs) : previous_(current_packs) { current_packs = packs; }

ScopedKMajorPacks::~ScopedKMajorPacks() { current_packs = previous_; }

const KMajorPacks* CurrentKMajorPacks() {
  return packs_in_use.load(std::memory_order_relaxed) ? current_packs : nullptr;
}

void SetKMajorPacksInUse(bool on) { packs_in_use.store(on, std::memory_order_relaxed); }

}  // namespace pdserve
