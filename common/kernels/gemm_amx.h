// An exact prefill GEMM on AMX-BF16 tiles: y = x W^T with x fp32 [M, K] and
// W bf16 [N, K], numerically an fp32 GEMM (another summation order):
//   AmxSplitAvailable    this CPU can run it (AMX-BF16 + AVX-512BW)
//   AmxSplitSupported    shapes it takes (K % 32 == 0, N % 16 == 0)
//   AmxSplitPackedWords  size of the packed activations, in 32-bit words
//   AmxSplitPackX        x -> three bf16 terms in the B-tile (VNNI) layout
//   AmxSplitGemm         output columns [n0, n1) from packed x and W
//
// The split: x = xh + xm + xl exactly (xh = x truncated to bf16, xm = the
// remainder truncated, xl = what is left: 3 x 8 significant bits hold
// fp32's 24). Each bf16 x bf16 product is exact in fp32, and TDPBF16PS sums
// them in fp32 tiles, so the result has fp32-GEMM accuracy at 3x the AMX
// flops (bf16 inputs below 2^-126 count as zero on AMX; an inf in x gives
// NaN). The A tile is W itself (16 rows x 32 k, no packing); the B tile is
// the packed x (16 k-pairs x 16 rows of x), so C holds y^T blocks, written
// transposed into y. Each output sums k in increasing order, the three
// terms interleaved per 32 k: its bits depend neither on M, nor on the
// rows around it, nor on the thread split.
//
// No LibTorch. Call only where AmxSplitAvailable(); every call configures
// and releases the tiles of the calling thread.
#pragma once

#include <cstdint>

namespace pdserve {

bool AmxSplitAvailable();
bool AmxSplitSupported(int64_t M, int64_t N, int64_t K);

// Packed x holds ceil(M / 32) * 2 blocks of 16 rows (rows past M are zero).
inline constexpr int64_t kAmxSplitRowBlock = 16;
int64_t AmxSplitPackedWords(int64_t M, int64_t K);
inline int64_t AmxSplitRowBlocks(int64_t M) { return (M + 31) / 32 * 2; }

// Packs row blocks [b0, b1) (of kAmxSplitRowBlock rows) of x [M, K]
// (row stride K) into `packed` (AmxSplitPackedWords(M, K) words).
void AmxSplitPackX(const float* x, int64_t M, int64_t K, int64_t b0, int64_t b1, uint32_t* packed);

// y[m * ldy + n] = sum_k x[m, k] W[n, k] for all m < M, n in [n0, n1)
// (multiples of 16); W row-major [N, K] bf16 bits.
void AmxSplitGemm(const uint32_t* packed, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy);

}  // namespace pdserve
