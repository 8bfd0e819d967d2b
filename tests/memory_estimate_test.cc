// The load-time memory estimate and its refusal (common/engine/memory_estimate.h).
#include "common/engine/memory_estimate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/attention.h"
#include "common/kernels/bf16_matmul.h"
#include "common/model/checkpoint.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"
#include "common/model/transformer.h"
#include "common/kernels/prefill_attention.h"
#include "common/model/weights.h"
#include "tests/bf16_mode_util.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;

ModelConfig Tiny() {
  auto c = LoadModelConfig(std::string(PDSERVE_SOURCE_DIR) + "/configs/tiny.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / absl::StrCat("memory_estimate_test_", getpid(), "_", name);
  fs::create_directories(d);
  return d;
}

TEST(MemoryEstimateTest, WeightBytesMatchTheLoadedModel) {
  const ModelConfig c = Tiny();
  const ModelWeights w = RandomWeights(c, 1);
  const MemoryEstimate f32 = EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 512, Bf16Matmul::kWiden);
  EXPECT_EQ(f32.weights_f32_bytes, WeightBytes(w));
  EXPECT_EQ(f32.weights_bf16_bytes, 0);
  EXPECT_EQ(f32.widened_f32_bytes, 0);

  const fs::path dir = TempDir("bf16");
  ASSERT_TRUE(SaveCheckpoint(w, dir.string(), StDtype::kF32).ok());
  LoadOptions lo;
  lo.weights_dtype = WeightsDtype::kBF16;
  auto loaded = LoadCheckpoint(dir.string(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const MemoryEstimate bf16 = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 512, Bf16Matmul::kWiden);
  EXPECT_EQ(bf16.weights_f32_bytes + bf16.weights_bf16_bytes, WeightBytes(*loaded));
  EXPECT_GT(bf16.weights_bf16_bytes, 0);
  EXPECT_LT(bf16.weights_f32_bytes + bf16.weights_bf16_bytes, f32.weights_f32_bytes);
  // Linear widens bf16 weights into fp32 buffers: at least the largest
  // matmul weight (the embedding / tied head here) in fp32.
  EXPECT_GE(bf16.widened_f32_bytes, 4 * c.vocab_size * c.d_model);
  fs::remove_all(dir);
}

// Only the paths that widen count fp32 copies: amx none, split only the
// shapes its kernel does not take (here the tied head: a vocabulary of 40
// rows, not a multiple of 16), widen all of them (the largest is then an
// expert slice).
// --f32-packed-weights: one more fp32 copy of every layer's matmul weight
// (not the embedding, head or router), at least what PackedF32Weights holds.
TEST(MemoryEstimateTest, PackedF32WeightsAreCounted) {
  const ModelConfig c = Tiny();
  const MemoryEstimate off = EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden);
  const MemoryEstimate on = EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden, true);
  EXPECT_EQ(off.packed_f32_bytes, 0);
  EXPECT_EQ(on.total(), off.total() + on.packed_f32_bytes);
  // bf16 weights packed (widened) take the same fp32 bytes.
  EXPECT_EQ(EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden, true).packed_f32_bytes,
            on.packed_f32_bytes);
  ModelWeights w = RandomWeights(c, 1);
  int64_t layer_matmul_bytes = 0;
  PackedF32Weights packs;
  for (const NamedTensor& nt : NamedTensors(&w)) {
    if (!nt.is_matmul_weight || nt.name.rfind("blocks.", 0) != 0) continue;
    layer_matmul_bytes += 4 * nt.tensor->numel();
    if (nt.tensor->dim() == 3) {
      for (int64_t e = 0; e < nt.tensor->size(0); ++e) packs.Add(nt.tensor->select(0, e));
    } else {
      packs.Add(*nt.tensor);
    }
  }
  EXPECT_GE(on.packed_f32_bytes, layer_matmul_bytes);
  EXPECT_GE(on.packed_f32_bytes, packs.bytes());
}

// --bf16-matmul kmajor with bf16 weights: the k-major packs are counted,
// exactly what the engine packs, in place of the row-major matrices they
// replace (all but the padding of N to groups of 32; the head's pack is
// the tied embedding's, so no bf16 matrix is left); kept beside them where
// a benchmark asks (KMajorKeepsRowMajor). --bf16-matmul dot packs the same
// matrices (its kernel reads the packs), so it counts the same bytes.
TEST(MemoryEstimateTest, KMajorPacksAreCounted) {
  const ModelConfig c = Tiny();
  const MemoryEstimate widen = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden);
  const MemoryEstimate kmajor = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kKMajor);
  EXPECT_EQ(widen.kmajor_bytes, 0);
  EXPECT_EQ(EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kKMajor).kmajor_bytes, 0);
  EXPECT_EQ(kmajor.weights_bf16_bytes, 0);
  EXPECT_GE(kmajor.kmajor_bytes, widen.weights_bf16_bytes);
  EXPECT_LT(kmajor.kmajor_bytes, widen.weights_bf16_bytes * 11 / 10);
  EXPECT_EQ(kmajor.weights_f32_bytes, widen.weights_f32_bytes);
  SetKMajorKeepsRowMajor(true);
  const MemoryEstimate kept = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kKMajor);
  SetKMajorKeepsRowMajor(false);
  EXPECT_EQ(kept.weights_bf16_bytes, widen.weights_bf16_bytes);
  const MemoryEstimate dot = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kDot);
  EXPECT_EQ(dot.kmajor_bytes, kmajor.kmajor_bytes);
  EXPECT_EQ(dot.weights_bf16_bytes, 0);
  if (!GemvAvailable()) GTEST_SKIP() << "this CPU has no AVX2+FMA: the engine makes no packs to compare with";
  const testing::RestoreBf16Matmul restore;
  // The bytes of the packs a model loaded under `mode` makes (-1: none).
  const auto packed_bytes = [&c](Bf16Matmul mode) -> int64_t {
    EXPECT_TRUE(SetBf16Matmul(mode).ok());
    ModelWeights w = RandomWeights(c, 1);
    ConvertWeights(&w, WeightsDtype::kBF16);
    const Transformer model(std::move(w));
    return model.kmajor_packs() != nullptr ? model.kmajor_packs()->bytes() : -1;
  };
  EXPECT_EQ(packed_bytes(Bf16Matmul::kKMajor), kmajor.kmajor_bytes);
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: no dot model to compare";
  EXPECT_EQ(packed_bytes(Bf16Matmul::kDot), dot.kmajor_bytes);
}

// int8 weights: the Q8_0 bytes of exactly the matrices ConvertWeights
// quantizes, the rest fp32, and prefill's fp32 widening of them; where the
// engine packs them k-major instead (Q8PacksKMajor: PDSERVE_Q8_KERNEL=dot
// on AVX-512 VNNI, as memory_estimate_q8kmajor_test runs), exactly the
// packs' bytes in the rows' place, and no widening (their kernel takes
// every row).
TEST(MemoryEstimateTest, Int8WeightsAreCountedAsQ8) {
  const ModelConfig c = Tiny();
  ModelWeights w = RandomWeights(c, 1);
  const int64_t f32_bytes = WeightBytes(w);
  ConvertWeights(&w, WeightsDtype::kInt8);
  const int64_t loaded = WeightBytes(w);
  EXPECT_LT(loaded, f32_bytes / 3);
  const MemoryEstimate e = EstimateMemory(c, WeightsDtype::kInt8, KvDtype::kF32, 0, 512, Bf16Matmul::kWiden);
  EXPECT_EQ(e.weights_bf16_bytes, 0);
  const std::string described = DescribeMemory(e, MemoryLimit{});
  if (!Q8PacksKMajor()) {
    EXPECT_NE(described.find(" int8"), std::string::npos) << described;
    EXPECT_EQ(e.weights_f32_bytes + e.weights_int8_bytes, loaded);
    EXPECT_EQ(e.kmajor_bytes, 0);
    EXPECT_EQ(e.widened_f32_bytes, 2 * 4 * c.vocab_size * c.d_model);  // the tied head, buffered, one per thread
    return;
  }
  EXPECT_EQ(e.widened_f32_bytes, 0);
  EXPECT_EQ(e.weights_int8_bytes, 0);  // every Q8_0 matrix is packed (the head's pack is the tied embedding's)
  EXPECT_NE(described.find("k-major packs"), std::string::npos) << described;
  // The packs hold the rows' bytes plus the padding of N to groups of 32.
  EXPECT_GE(e.weights_f32_bytes + e.weights_int8_bytes + e.kmajor_bytes, loaded);
  EXPECT_LT(e.weights_f32_bytes + e.weights_int8_bytes + e.kmajor_bytes, loaded * 11 / 10);
  const Transformer model(std::move(w));
  ASSERT_NE(model.kmajor_packs(), nullptr);
  EXPECT_EQ(e.kmajor_bytes, model.kmajor_packs()->bytes());
}

TEST(MemoryEstimateTest, CopiesFollowTheBf16Path) {
  ModelConfig c = Tiny();
  c.vocab_size = 40;
  const auto copies = [&](Bf16Matmul path) {
    return EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, path).widened_f32_bytes;
  };
  EXPECT_EQ(copies(Bf16Matmul::kAmx), 0);
  EXPECT_EQ(copies(Bf16Matmul::kDot), 0);  // bf16 weights read as they are
  // W [N, K] in the per-thread buffer in oneDNN's packed layout
  // (PackedF32Bytes, checked against real packs in gemm_dnnl_test).
  EXPECT_EQ(copies(Bf16Matmul::kAmxSplit), 2 * PackedF32Bytes(c.vocab_size, c.d_model));  // buffered, one per thread
  EXPECT_EQ(copies(Bf16Matmul::kWiden),
            2 * std::max(PackedF32Bytes(c.expert_hidden, c.d_model), PackedF32Bytes(c.d_model, c.expert_hidden)));
  EXPECT_GE(PackedF32Bytes(c.expert_hidden, c.d_model), 4 * c.expert_hidden * c.d_model);
  c.vocab_size = 48;
  EXPECT_EQ(copies(Bf16Matmul::kAmxSplit), 0);
  EXPECT_EQ(EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden).widened_f32_bytes, 0);
}

TEST(MemoryEstimateTest, KvBudgetAndWorkspaceAddUp) {
  const ModelConfig c = Tiny();
  const MemoryEstimate a = EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden);
  const MemoryEstimate b =
      EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, int64_t{3} << 20, 64, Bf16Matmul::kWiden);
  EXPECT_EQ(b.kv_budget_bytes, int64_t{3} << 20);
  EXPECT_EQ(b.total() - a.total(), int64_t{3} << 20);
  EXPECT_GT(a.workspace_bytes, 0);
  EXPECT_GT(EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 512, Bf16Matmul::kWiden).workspace_bytes,
            a.workspace_bytes);
  EXPECT_EQ(a.total(), a.weights_f32_bytes + a.workspace_bytes);
}

// The workspace covers the chunk that ends a max_context prompt. With the
// fused prefill attention (prefill_attention.h): a global layer's K and V
// in fp32 whatever the KV dtype, and one more copy of K while it is laid out. Without it: a block of query rows scores
// against every key (fp32, plus a bool mask and its negation), and bf16
// K/V widened to fp32 for that chunk.
TEST(MemoryEstimateTest, WorkspaceCoversTheLongestContext) {
  ModelConfig c = Tiny();
  const auto workspace = [&](KvDtype kv, int64_t chunk) {
    return EstimateMemory(c, WeightsDtype::kF32, kv, 0, chunk, Bf16Matmul::kWiden).workspace_bytes;
  };
  const bool fused = PrefillAttnSupported({c.n_heads, c.n_kv_heads, c.head_dim, false});
  std::cout << "[ NOTE     ] attention workspace of the "
            << (fused ? "fused kernel" : "ATen form (no fused kernel here)") << "\n";
  const int64_t rows = std::min<int64_t>(512, kAttentionBlockRows), f32 = workspace(KvDtype::kF32, 512);
  const int64_t per_key = fused ? 4 * 3 * c.n_kv_heads * c.head_dim : rows * (4 * c.n_heads + 2);
  c.max_context += 1000;
  EXPECT_EQ(workspace(KvDtype::kF32, 512) - f32, 1000 * per_key);
  EXPECT_EQ(workspace(KvDtype::kBF16, 512) - workspace(KvDtype::kF32, 512),
            fused ? 0 : 4 * 2 * c.max_context * c.n_kv_heads * c.head_dim);
  // A chunk longer than the context still counts its own keys and window.
  c.max_context = 16;
  const int64_t short_context = workspace(KvDtype::kF32, 64);
  c.max_context = 64 + c.window;
  EXPECT_EQ(short_context, workspace(KvDtype::kF32, 64));
  c.max_context += 1;
  const int64_t per_key_64 = fused ? per_key : 64 * (4 * c.n_heads + 2);
  EXPECT_EQ(workspace(KvDtype::kF32, 64) - short_context, per_key_64);
}

TEST(MemoryEstimateTest, RefusalNamesTheNumbers) {
  const MemoryEstimate e =
      EstimateMemory(Tiny(), WeightsDtype::kF32, KvDtype::kF32, int64_t{64} << 20, 64, Bf16Matmul::kWiden);
  EXPECT_TRUE(CheckMemoryFits(e, MemoryLimit{}).ok());  // no limit
  EXPECT_TRUE(CheckMemoryFits(e, MemoryLimit{e.total(), "test"}).ok());
  const absl::Status s = CheckMemoryFits(e, MemoryLimit{e.total() - 1, "/sys/fs/cgroup/memory.max"});
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string m(s.message());
  EXPECT_NE(m.find("KV budget 64.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find(absl::StrCat(e.total(), " > ", e.total() - 1, " bytes")), std::string::npos) << m;
  EXPECT_NE(m.find("/sys/fs/cgroup/memory.max"), std::string::npos) << m;
  EXPECT_NE(m.find("--weights-dtype bf16"), std::string::npos) << m;
}

TEST(MemoryEstimateTest, ReadsTheLimit) {
  const fs::path dir = TempDir("limits");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string v2_max = write("memory.max", "max\n"), v2 = write("v2", "1073741824\n"),
                    v1_unlimited = write("v1", "9223372036854771712\n"), missing = (dir / "missing").string();
  auto none = ReadMemoryLimit(nullptr, {missing, v2_max, v2});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->bytes, -1);
  auto one_gib = ReadMemoryLimit(nullptr, {missing, v2, v2_max});
  ASSERT_TRUE(one_gib.ok());
  EXPECT_EQ(one_gib->bytes, int64_t{1} << 30);
  EXPECT_EQ(one_gib->source, v2);
  EXPECT_EQ(ReadMemoryLimit(nullptr, {v1_unlimited})->bytes, -1);
  EXPECT_EQ(ReadMemoryLimit(nullptr, {missing})->bytes, -1);
  // The override wins over the files.
  EXPECT_EQ(ReadMemoryLimit("12345", {v2})->bytes, 12345);
  EXPECT_EQ(ReadMemoryLimit("12345", {v2})->source, kMemoryLimitEnv);
  EXPECT_EQ(ReadMemoryLimit("max", {v2})->bytes, -1);
  EXPECT_EQ(ReadMemoryLimit("lots", {v2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadMemoryLimit("-5", {v2}).status().code(), absl::StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(MemoryEstimateTest, EngineLoadRefusesBeforeReadingWeights) {
  const ModelConfig c = Tiny();
  const fs::path dir = TempDir("engine");
  ASSERT_TRUE(SaveCheckpoint(RandomWeights(c, 2), dir.string(), StDtype::kF32).ok());
  EngineOptions o;
  o.kv_budget_bytes = int64_t{256} << 20;
  const MemoryEstimate e =
      EstimateMemory(c, o.weights_dtype, o.kv.dtype, o.kv_budget_bytes, o.prefill_chunk, GetBf16Matmul());
  // Fits without the KV budget, not with it.
  setenv(kMemoryLimitEnv, std::to_string(e.total() - e.kv_budget_bytes / 2).c_str(), 1);
  auto refused = Engine::Load(dir.string(), o);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("KV budget 256.0 MiB"), std::string::npos) << refused.status();
  o.kv_budget_bytes = 0;
  EXPECT_TRUE(Engine::Load(dir.string(), o).ok());
  setenv(kMemoryLimitEnv, "not-a-number", 1);
  EXPECT_EQ(Engine::Load(dir.string(), o).status().code(), absl::StatusCode::kInvalidArgument);
  unsetenv(kMemoryLimitEnv);
  EXPECT_TRUE(Engine::Load(dir.string(), o).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pdserve
