// The k-major copies of a model's bf16 matrices (gemv_kmajor.h) that the
// decode kernels read under --bf16-matmul kmajor or dot (bf16_matmul.h),
// and of its int8 Q8_0 matrices (gemv_q8_kmajor.h) that the int8 dot
// kernel reads where Q8PacksKMajor() (linear_int8.h):
//   KMajorPacks        packs made at load, found by the address of the
//                      matrix they copy (Add) or replace (Take)
//   ScopedKMajorPacks  puts one model's packs in scope for the calling
//                      thread (Transformer::Forward); AsGemvMatrix
//                      (gemv_matrix.h) looks there
//   CurrentKMajorPacks the packs in scope, or nullptr
//   SetKMajorPacksInUse  benchmarks: hide every model's packs, for a
//                      same-process comparison with widen's decode (only
//                      where the row-major matrices were kept)
//   SetKMajorKeepsRowMajor  benchmarks: Transformer adds (keeps the
//                      row-major matrices) instead of taking
//
// Taken, a pack is the only copy of its matrix: decode multiplies from it,
// prefill's GEMMs widen it (WidenKMajorT; int8: DequantizeQ8KMajorRow), a
// tied embedding's lookup gathers from it (WidenKMajorRow, the same), so the
// mode holds the weights once
// (plus the padding of N to a multiple of 32). The matrix's tensor stays as
// a stand-in: the same shape, dtype and strides over an address range
// reserved without memory and without access, so every view of it (an
// expert, q within q|kv) keeps the address its pack is found by, and a read
// that bypasses the packs faults at once instead of reading zeros.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <unordered_map>

#include "common/util/thread_scope.h"

namespace pdserve {

class HugePageArena;

class KMajorPacks {
 public:
  // Packs bf16 or Q8_0 (int8, linear_int8.h) w [N, K], or each matrix of
  // a stack [E, N, K], on `arena`'s 2 MiB pages (nullptr: the heap); groups
  // of 32 rows in parallel. w must outlive this object and keep its
  // address. False, and nothing kept, for another dtype, a Q8_0 w on a CPU
  // without AVX2 + FMA + F16C, a non-contiguous w or other shapes.
  bool Add(const at::Tensor& w, HugePageArena* arena);

  // Add, with the packs found by the address of a stand-in that replaces
  // *w (above). The values *w held are freed when nothing else holds them.
  // False, and *w unchanged, where Add would refuse.
  bool Take(at::Tensor* w, HugePageArena* arena);

  // The pack of the matrix whose first element is at `data`, when it has
  // `cols` columns and at least `rows` rows (a view of its first rows, such
  // as q_proj within q|kv, reads the pack's first outputs); else nullptr.
  const uint16_t* Find(const void* data, int64_t rows, int64_t cols) const;
  // The same for a Q8_0 matrix of `cols` values a row (its pack's bytes).
  const uint8_t* FindQ8(const void* data, int64_t rows, int64_t cols) const;

  int64_t bytes() const { return bytes_; }
  int64_t count() const { return static_cast<int64_t>(packs_.size()); }
  // True when some pack was taken: then these packs must stay in use.
  bool holds_only_copies() const { return taken_; }

 private:
  struct Pack {
    at::Tensor data;  // bf16: uint16 storage as kShort; Q8_0: bytes as kByte
    int64_t rows, cols;
    bool q8;
  };
  const Pack* Lookup(const void* data, int64_t rows, int64_t cols, bool q8) const;
  bool AddKeyed(const at::Tensor& w, const void* key, HugePageArena* arena);

  std::unordered_map<const void*, Pack> packs_;
  int64_t bytes_ = 0;
  bool taken_ = false;
};

using ScopedKMajorPacks = ThreadScope<KMajorPacks>;  // common/util/thread_scope.h

const KMajorPacks* CurrentKMajorPacks();

// Benchmarks only (pdserve-step-bench --alternate-kmajor): false makes
// CurrentKMajorPacks return nullptr in every thread, unless the packs in
// scope hold the only copies, so decode reads the row-major matrices with
// widen's kernels and bits; true (the default) undoes it.
void SetKMajorPacksInUse(bool on);

// Benchmarks only: true before a model loads makes it keep its row-major
// bf16 matrices beside the packs (twice the memory), as SetKMajorPacksInUse
// needs. Default false. Read by Transformer and the memory estimate.
void SetKMajorKeepsRowMajor(bool on);
bool KMajorKeepsRowMajor();

}  // namespace pdserve
