// The k-major copies of a model's bf16 matrices (gemv_kmajor.h) that the
// decode kernels read under --bf16-matmul kmajor (bf16_matmul.h):
//   KMajorPacks        packs made at load, found by the address of the
//                      matrix they copy
//   ScopedKMajorPacks  puts one model's packs in scope for the calling
//                      thread (Transformer::Forward); AsGemvMatrix
//                      (gemv_matrix.h) looks there
//   CurrentKMajorPacks the packs in scope, or nullptr
//   SetKMajorPacksInUse  benchmarks: hide every model's packs, for a
//                      same-process comparison with widen's decode
//
// The row-major matrices stay: prefill's GEMMs, the embedding lookup of a
// tied head and every other path read them, so the packs cost as many
// bytes again as the bf16 matrices (counted in the memory estimate).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <unordered_map>

namespace pdserve {

class HugePageArena;

class KMajorPacks {
 public:
  // Packs bf16 w [N, K], or each matrix of a stack [E, N, K], on `arena`'s
  // 2 MiB pages (nullptr: the heap); groups of 32 rows in parallel. w must
  // outlive this object and keep its address. False, and nothing kept, for
  // another dtype, a non-contiguous w or other shapes.
  bool Add(const at::Tensor& w, HugePageArena* arena);

  // The pack of the matrix whose first element is at `data`, when it has
  // `cols` columns and at least `rows` rows (a view of its first rows, such
  // as q_proj within q|kv, reads the pack's first outputs); else nullptr.
  const uint16_t* Find(const void* data, int64_t rows, int64_t cols) const;

  int64_t bytes() const { return bytes_; }
  int64_t count() const { return static_cast<int64_t>(packs_.size()); }

 private:
  struct Pack {
    at::Tensor data;  // uint16 storage as kShort
    int64_t rows, cols;
  };
  std::unordered_map<const void*, Pack> packs_;
  int64_t bytes_ = 0;
};

class ScopedKMajorPacks {
 public:
  explicit ScopedKMajorPacks(const KMajorPacks* packs);  // nullptr: none
  ~ScopedKMajorPacks();
  ScopedKMajorPacks(const ScopedKMajorPacks&) = delete;
  ScopedKMajorPacks& operator=(const ScopedKMajorPacks&) = delete;

 private:
  const KMajorPacks* previous_;
};

const KMajorPacks* CurrentKMajorPacks();

// Benchmarks only (pdserve-step-bench --alternate-kmajor): false makes
// CurrentKMajorPacks return nullptr in every thread, so decode reads the
// row-major matrices with widen's kernels and bits; true (the default)
// undoes it.
void SetKMajorPacksInUse(bool on);

}  // namespace pdserve
