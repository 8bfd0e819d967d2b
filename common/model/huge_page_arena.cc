#include "common/model/huge_page_arena.h"

#include <malloc.h>
#include <sys/mman.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/util/huge_pages_env.h"

namespace pdserve {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kAlign = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

// One mapping: `size` bytes at a 2 MiB-aligned `base` inside [raw, raw + raw_size).
struct HugePageArena::Chunk {
  void* raw = nullptr;
  size_t raw_size = 0;
  char* base = nullptr;
  size_t size = 0;
  ~Chunk() {
    if (raw != nullptr) munmap(raw, raw_size);
  }
};

HugePageArena::HugePageArena(size_t chunk_bytes) : chunk_bytes_(RoundUp(chunk_bytes, kHugePage)) {}
HugePageArena::~HugePageArena() = default;

std::shared_ptr<HugePageArena::Chunk> HugePageArena::NewChunk(size_t bytes) {
  auto c = std::make_shared<Chunk>();
  c->size = RoundUp(bytes, kHugePage);
  // Over-map by one huge page and align inside it: THP backs only aligned 2 MiB ranges.
  c->raw_size = c->size + kHugePage;
  void* p = mmap(nullptr, c->raw_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  c->raw = p;
  c->base = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(p), kHugePage));
  madvise(c->base, c->size, MADV_HUGEPAGE);  // advice only: EINVAL where THP is compiled out
  return c;
}

at::Tensor HugePageArena::Copy(const at::Tensor& t) {
  if (!t.defined()) return t;
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (bytes < kMinBytes) return t;
  std::shared_ptr<Chunk> chunk;
  size_t offset = 0;
  if (bytes > chunk_bytes_ / 2) {
    chunk = NewChunk(bytes);
  } else {
    if (chunk_ == nullptr || used_ + bytes > chunk_->size) {
      chunk_ = NewChunk(chunk_bytes_);
      used_ = 0;
    }
    chunk = chunk_;
    offset = used_;
    used_ = RoundUp(used_ + bytes, kAlign);
  }
  if (chunk == nullptr) return t;
  void* dst = chunk->base + offset;
  const at::Tensor src = t.detach().contiguous();
  std::memcpy(dst, src.data_ptr(), bytes);
  at::Tensor out = at::from_blob(dst, t.sizes(), [chunk](void*) {}, t.options().requires_grad(false));
  return t.requires_grad() ? out.requires_grad_(true) : out;
}

bool HugePagesEnabled() {
  static const bool on = HugePagesOn(std::getenv(kHugePagesEnv));
  return on;
}

at::Tensor PlaceOnHugePages(HugePageArena* arena, const at::Tensor& t) {
  return HugePagesEnabled() ? arena->Copy(t) : t;
}

void ReleaseFreedHeap() { malloc_trim(0); }

int64_t AnonHugePageBytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "AnonHugePages:" && in >> kb) return kb * 1024;
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

}  // namespace pdserve
