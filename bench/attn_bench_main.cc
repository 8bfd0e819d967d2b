// pdserve-attn-bench: the fused decode attention kernel alone
// (decode_attention.h), one thread, per ISA build, at the 502M model's
// attention shape (8 query heads, 4 KV heads, d = 96), interleaved rounds.
// Each call reads a different copy of the K/V rows (a pool of >= 256 MiB),
// so they come from DRAM, as for a long sequence in a decode step.
//
//   pdserve-attn-bench [ROUNDS=3] [ROWS=128,1024,4096]
//
// Prints per (rows, K/V dtype, isa) the best and worst round: us per call
// (one sequence, one layer: every split, then the merge) and GB/s of K/V
// read, beside one thread's plain read of the same pool (a sum of its
// floats: the bandwidth a call could reach).
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/decode_attention.h"
#include "common/kernels/gemv_kernels.h"

namespace pdserve {
namespace {

constexpr DecodeAttnShape kShape{8, 4, 96, false};
constexpr int64_t kPoolBytes = int64_t{256} << 20;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Sample {
  double us = 0, gbs = 0;
};

// Times calls over distinct copies of one sequence's K|V rows (k then v, each rows * K * d elements).
Sample TimeAttention(int64_t rows, bool bf16, DecodeAttnIsa isa, const std::vector<char>& pool) {
  DecodeAttnShape shape = kShape;
  shape.bf16 = bf16;
  const int64_t half = rows * shape.n_kv_heads * shape.head_dim * (bf16 ? 2 : 4);
  const int64_t copies = static_cast<int64_t>(pool.size()) / (2 * half);
  const int64_t calls = std::max<int64_t>(8, std::min<int64_t>(copies, (int64_t{1} << 30) / (2 * half)));
  std::vector<float> q(shape.n_heads * shape.head_dim, 0.05f), sinks(shape.n_heads, 0.0f);
  std::vector<float> out(shape.n_heads * shape.head_dim);
  std::vector<float> scratch(DecodeAttnScratchFloats(shape) + DecodeAttnSplits(rows) * DecodeAttnPartialFloats(shape));
  const double t0 = Now();
  for (int64_t c = 0; c < calls; ++c) {
    const char* base = pool.data() + (c % copies) * 2 * half;
    DecodeAttention(q.data(), {base, base + half, rows}, shape, sinks.data(), scratch.data(), out.data(), isa);
  }
  const double s = Now() - t0;
  return {s / calls * 1e6, 2.0 * half * calls / s / 1e9};
}

// One thread's read bandwidth over the pool: an AVX2 sum of its floats, 4 vectors a step.
__attribute__((target("avx2"))) double PlainReadGbs(const std::vector<char>& pool) {
  const float* p = reinterpret_cast<const float*>(pool.data());
  const int64_t n = static_cast<int64_t>(pool.size()) / 4;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const double t0 = Now();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  const double s = Now() - t0;
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  if (lanes[0] == 12345.0f) std::printf(" ");  // keeps the sum
  return static_cast<double>(pool.size()) / s / 1e9;
}

constexpr char kUsage[] =
    "pdserve-attn-bench: the fused decode attention kernel alone, one thread, per ISA build, at the 502M\n"
    "model's shape (8 heads, 4 KV heads, d 96); each call reads a different copy of the K/V rows (256 MiB\n"
    "pool), so they come from DRAM.\n"
    "Usage: pdserve-attn-bench [ROUNDS (3, >= 1)] [ROWS (128,1024,4096: comma-separated, each 1..131072)]\n";

bool ParseArgs(int argc, char** argv, int* rounds, std::vector<int64_t>* lengths) {
  char* end = nullptr;
  *rounds = argc > 1 ? static_cast<int>(std::strtol(argv[1], &end, 10)) : 3;
  if (*rounds < 1 || (end != nullptr && *end != '\0')) return false;
  for (const char* p = argc > 2 ? argv[2] : "128,1024,4096"; *p != '\0';) {
    const int64_t n = std::strtoll(p, &end, 10);
    if (end == p || n < 1 || n > 131072 || (*end != ',' && *end != '\0')) return false;
    lengths->push_back(n);
    p = *end == ',' ? end + 1 : end;
  }
  return argc <= 3;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s", kUsage);
    return 0;
  }
  int rounds = 0;
  std::vector<int64_t> lengths;
  if (!ParseArgs(argc, argv, &rounds, &lengths)) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  if (!GemvAvailable()) {
    std::fprintf(stderr, "pdserve-attn-bench: this CPU has no AVX2+FMA\n");
    return 1;
  }
  std::vector<char> pool(kPoolBytes);
  std::mt19937 rng(1);
  for (size_t i = 0; i < pool.size(); i += 2) {  // small finite values whether read as fp32 or bf16
    pool[i] = static_cast<char>(rng());
    pool[i + 1] = static_cast<char>(0x3c + (rng() & 1));
  }
  std::vector<DecodeAttnIsa> isas{DecodeAttnIsa::kAvx2};
  if (DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) isas.push_back(DecodeAttnIsa::kAvx512);
  struct Row {
    int64_t rows;
    bool bf16;
    DecodeAttnIsa isa;
    std::vector<Sample> samples;
  };
  std::vector<Row> table;
  for (int64_t n : lengths) {
    for (bool bf16 : {true, false}) {
      for (DecodeAttnIsa isa : isas) table.push_back({n, bf16, isa, {}});
    }
  }
  std::vector<double> plain;
  for (int r = 0; r < rounds; ++r) {
    plain.push_back(PlainReadGbs(pool));
    for (Row& row : table) row.samples.push_back(TimeAttention(row.rows, row.bf16, row.isa, pool));
  }
  std::printf("one thread's plain read of the pool: %.1f-%.1f GB/s over %d rounds\n",
              *std::min_element(plain.begin(), plain.end()), *std::max_element(plain.begin(), plain.end()), rounds);
  std::printf("%8s %5s %7s %12s %12s %10s %10s\n", "rows", "kv", "isa", "best us", "worst us", "best GB/s",
              "worst GB/s");
  for (const Row& row : table) {
    auto by_us = [](const Sample& a, const Sample& b) { return a.us < b.us; };
    const Sample best = *std::min_element(row.samples.begin(), row.samples.end(), by_us);
    const Sample worst = *std::max_element(row.samples.begin(), row.samples.end(), by_us);
    std::printf("%8lld %5s %7s %12.1f %12.1f %10.1f %10.1f\n", static_cast<long long>(row.rows),
                row.bf16 ? "bf16" : "f32", DecodeAttnIsaName(row.isa), best.us, worst.us, best.gbs, worst.gbs);
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
