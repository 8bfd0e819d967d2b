// HugePageArena: tensors copied into anonymous mappings advised
// MADV_HUGEPAGE, so that the weights decode streams from DRAM every token
// sit on 2 MiB transparent huge pages instead of 4 KiB ones.
//
// Why: a DRAM-bound matrix-vector product walks the page table once per
// page it touches; in a VM that walk is two-level. On the AMD EPYC VM a
// two-thread sum of 1 GiB read 18-20 GB/s on 4 KiB pages and 23-25 GB/s on
// 2 MiB pages (docs/benchmarks.md §3). Most hosts set THP to
// "madvise" (used only where a program asks), so the default allocator's
// memory stays on 4 KiB pages.
//
//   HugePageArena::Copy    a contiguous copy of a tensor in the arena
//   PlaceOnHugePages       Copy, unless PDSERVE_HUGE_PAGES=0
//   HugePagesEnabled       PDSERVE_HUGE_PAGES by HugePagesOn (huge_pages_env.h)
//   ReleaseFreedHeap       give the heap freed by the copied tensors back
//   AnonHugePageBytes      this process's anonymous memory on huge pages
//
// The Transformer places its weights once, after fusing them (q|kv,
// gate|up): placing before the fusion would strand the pre-fusion copies in
// chunks that other weights keep mapped.
//
// Failure: when the kernel refuses the mapping, or THP is "never", tensors
// stay where they are or land on 4 KiB pages; nothing fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

namespace pdserve {

class HugePageArena {
 public:
  // Tensors are packed into chunks of `chunk_bytes` (rounded up to 2 MiB);
  // a tensor past half a chunk gets a mapping of its own. A chunk is unmapped
  // when the last tensor in it is freed, so the arena may die first.
  explicit HugePageArena(size_t chunk_bytes = size_t{64} << 20);
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // A contiguous copy of `t` (same dtype, shape, requires_grad) backed by the
  // arena; `t` itself when it is smaller than kMinBytes (norms, sinks) or
  // when the mapping fails.
  at::Tensor Copy(const at::Tensor& t);

  static constexpr size_t kMinBytes = size_t{64} << 10;

 private:
  struct Chunk;
  std::shared_ptr<Chunk> NewChunk(size_t bytes);

  size_t chunk_bytes_;
  std::shared_ptr<Chunk> chunk_;  // the chunk being filled
  size_t used_ = 0;               // bytes of chunk_ handed out
};

// False when PDSERVE_HUGE_PAGES is "0" (for A/B runs); read once.
bool HugePagesEnabled();

// arena->Copy(t) when HugePagesEnabled(), else t.
at::Tensor PlaceOnHugePages(HugePageArena* arena, const at::Tensor& t);

// malloc_trim(0): the tensors replaced by their copies were freed into
// malloc's heap, which would keep the small ones resident.
void ReleaseFreedHeap();

// AnonHugePages of /proc/self/smaps_rollup in bytes; -1 when unreadable.
int64_t AnonHugePageBytes();

}  // namespace pdserve
