// gpt-oss checkpoints as the engine loads them (common/model/gptoss_weights.h):
// what the weights hold, what they count, that a row's logits do not depend
// on its batch, and the fingerprint. Tokens against the numpy reference are
// tests/e2e/gptoss_e2e_test.sh's.
#include "common/model/gptoss_weights.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/engine/memory_estimate.h"
#include "common/kernels/bf16_matmul.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/checkpoint.h"
#include "common/model/fingerprint.h"
#include "common/model/moe_mxfp4.h"
#include "common/model/transformer.h"
#include "nlohmann/json.hpp"
#include "tests/gptoss_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

class GptOssWeightsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeTinyGptOss(dir_->Sub("a"), dir_->Sub("a.log"), 11));
    ASSERT_TRUE(testing::MakeTinyGptOss(dir_->Sub("b"), dir_->Sub("b.log"), 12));
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Model(const char* name) { return dir_->Sub(name); }

  static testing::TempDir* dir_;
};
testing::TempDir* GptOssWeightsTest::dir_ = nullptr;

TEST_F(GptOssWeightsTest, LoadsDenseTensorsAndMapsTheExperts) {
  auto w = LoadCheckpoint(Model("a"));
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = w->config;
  ASSERT_EQ(c.family, ModelFamily::kGptOss);
  ASSERT_EQ(static_cast<int64_t>(w->layers.size()), c.n_layers);
  EXPECT_NE(w->storage, nullptr);
  const int64_t H = c.n_heads, K = c.n_kv_heads, d = c.head_dim, D = c.d_model, F = c.expert_hidden;
  for (const LayerWeights& L : w->layers) {
    EXPECT_EQ(L.qkv_bias.sizes().vec(), (std::vector<int64_t>{H * d + 2 * K * d}));
    EXPECT_EQ(L.kv_proj.sizes().vec(), (std::vector<int64_t>{2 * K * d, D}));
    EXPECT_EQ(L.o_bias.sizes().vec(), (std::vector<int64_t>{D}));
    EXPECT_EQ(L.router_bias.sizes().vec(), (std::vector<int64_t>{c.n_experts}));
    EXPECT_FALSE(L.gate_proj.defined());
    ASSERT_NE(L.mxfp4, nullptr);
    EXPECT_EQ(L.mxfp4->n_experts(), c.n_experts);
    EXPECT_EQ(L.mxfp4->hidden, F);
    EXPECT_EQ(L.mxfp4->swiglu_limit, c.swiglu_limit);
    // Each expert's bias is its row of the layer's bias tensor.
    EXPECT_EQ(L.mxfp4->gate_up[1].bias, L.gate_up_bias.data_ptr<float>() + 2 * F);
    EXPECT_EQ(L.mxfp4->down[1].bias, L.down_bias.data_ptr<float>() + D);
  }
  // Counted: the dense tensors in fp32, the experts as stored (17 bytes per 32 weights).
  int64_t dense = 0;
  for (const NamedTensor& nt : NamedTensors(&*w)) dense += nt.tensor->numel() * 4;
  const int64_t experts = c.n_layers * c.n_experts * 3 * F * D / 32 * 17;
  EXPECT_EQ(Mxfp4ExpertBytes(c), experts);
  EXPECT_EQ(WeightBytes(*w), dense + experts);
  // Parameters: every dense tensor's values, the experts' weights and biases.
  int64_t params = 0;
  for (const NamedTensor& nt : NamedTensors(&*w)) params += nt.tensor->numel();
  EXPECT_EQ(c.TotalParams(), params + c.n_layers * c.n_experts * 3 * F * D);
  // The estimate names the mapped bytes apart.
  const MemoryEstimate e = EstimateMemory(c, WeightsDtype::kF32, KvDtype::kF32, 0, 64, Bf16Matmul::kWiden, false);
  EXPECT_EQ(e.weights_mapped_bytes, experts);
  EXPECT_NE(DescribeMemory(e, MemoryLimit{}).find("mapped from the checkpoint"), std::string::npos);
  // In bf16 the embedding, head, q and o are mapped too, and nothing is packed.
  const MemoryEstimate b = EstimateMemory(c, WeightsDtype::kBF16, KvDtype::kF32, 0, 64, Bf16Matmul::kKMajor, false);
  EXPECT_EQ(b.weights_mapped_bytes, experts + 2 * (2 * c.vocab_size * D + c.n_layers * 2 * H * d * D));
  EXPECT_EQ(b.kmajor_bytes, 0);
}

// Three prompts in one forward give each the logits it gets alone, bit for
// bit, with either MXFP4 kernel. 18 rows in all: the dense matrices take the
// row kernels throughout (past kGemvMaxBatchRows they take a GEMM, whose
// order depends on the rows, as for pdserve's own checkpoints).
TEST_F(GptOssWeightsTest, ARowsLogitsDoNotDependOnItsBatch) {
  auto w = LoadCheckpoint(Model("a"));
  ASSERT_TRUE(w.ok()) << w.status();
  const Transformer model(*std::move(w));
  const int64_t V = model.config().vocab_size;
  const std::vector<int64_t> lengths = {5, 1, 12};
  std::vector<int64_t> ids;
  for (int64_t n = 0, total = 18; n < total; ++n) ids.push_back((n * 7919 + 13) % V);
  for (Mxfp4KernelChoice k : {Mxfp4KernelChoice::kFma, Mxfp4KernelChoice::kDot}) {
    SetMoeMxfp4Kernel(k);
    std::vector<Segment> segs;
    int64_t pos = 0;
    for (int64_t len : lengths) segs.push_back({nullptr, 0, len});
    auto all = model.Forward(at::tensor(ids, at::kLong), segs);
    ASSERT_TRUE(all.ok()) << all.status();
    for (size_t i = 0; i < lengths.size(); ++i) {
      const at::Tensor one_ids = at::tensor(std::vector<int64_t>(ids.begin() + pos, ids.begin() + pos + lengths[i]),
                                            at::kLong);
      auto alone = model.Forward(one_ids, {{nullptr, 0, lengths[i]}});
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_TRUE(at::equal(all->select(0, static_cast<int64_t>(i)), alone->select(0, 0)))
          << "prompt " << i << " kernel " << static_cast<int>(k);
      pos += lengths[i];
    }
  }
  SetMoeMxfp4Kernel(Mxfp4KernelChoice::kFma);
}

// The last position's logits of a 300-token prompt (past the window, 32,
// and past original_max_position_embeddings, 256) against the numpy
// reference's (tests/reference/gpt_oss_ref.py --dump-logits, its fp32 and
// float64 runs), f32 weights: within 1e-5 of the largest |logit| with the
// fma MXFP4 kernel (measured on a Zen 5 EPYC: 6.5e-7 against the fp32 run,
// 5.0e-7 against float64), within 5e-2 with dot, which rounds the experts'
// activations to int8 (measured: 1.2e-2).
TEST_F(GptOssWeightsTest, LogitsMatchTheReference) {
  auto w = LoadCheckpoint(Model("a"));
  ASSERT_TRUE(w.ok()) << w.status();
  const Transformer model(*std::move(w));
  const int64_t V = model.config().vocab_size, T = 300;
  std::vector<int64_t> ids;
  std::string csv;
  for (int64_t n = 0; n < T; ++n) {
    ids.push_back((n * 7919 + 13) % V);
    csv += (n > 0 ? "," : "") + std::to_string(ids.back());
  }
  const auto last_logits = [&](Mxfp4KernelChoice kernel) {
    SetMoeMxfp4Kernel(kernel);
    auto logits = model.Forward(at::tensor(ids, at::kLong), {{nullptr, 0, T}});
    SetMoeMxfp4Kernel(Mxfp4KernelChoice::kFma);
    EXPECT_TRUE(logits.ok()) << logits.status();
    return logits.ok() ? logits->select(0, 0).to(at::kDouble).contiguous() : at::zeros({V}, at::kDouble);
  };
  const at::Tensor fma = last_logits(Mxfp4KernelChoice::kFma), dot = last_logits(Mxfp4KernelChoice::kDot);
  for (const char* precision : {"", "--float64"}) {
    const std::string dump = dir_->Sub(std::string("logits") + precision + ".json");
    const std::string cmd = std::string("/usr/bin/python3 ") + PDSERVE_SOURCE_DIR +
                            "/tests/reference/gpt_oss_ref.py generate --model " + Model("a") + " --prompt-ids " + csv +
                            " --max-new-tokens 1 --ignore-eos --dump-logits " + dump + " " + precision + " > " +
                            dump + ".out 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(dump);
    const std::vector<double> ref = nlohmann::json::parse(in).get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(ref.size()), V);
    const at::Tensor want = at::tensor(ref, at::kDouble);
    const double peak = want.abs().max().item<double>();
    EXPECT_GT(peak, 1.0) << precision;  // logits of some size, not all zero
    for (const auto& [name, got, tolerance] :
         {std::make_tuple("fma", fma, 1e-5), std::make_tuple("dot", dot, 5e-2)}) {
      const double err = (got - want).abs().max().item<double>();
      EXPECT_LE(err, tolerance * peak) << name << " vs reference " << precision << ": max |diff| " << err
                                       << ", peak " << peak;
      std::printf("logits (%s) vs the reference %s: max |diff| %.3g, peak %.3g (%.3g of it)\n", name,
                  *precision ? precision : "(fp32)", err, peak, err / peak);
    }
  }
}

// --weights-dtype bf16 on a checkpoint stored in bf16: embedding, head, q
// and o are views of the mapping (no private copy), and the logits are
// those of the f32 load (the same values, widened exactly).
TEST_F(GptOssWeightsTest, Bf16MatricesStayInTheMapping) {
  LoadOptions bf16;
  bf16.weights_dtype = WeightsDtype::kBF16;
  auto mapped = LoadCheckpoint(Model("a"), bf16);
  auto f32 = LoadCheckpoint(Model("a"));
  ASSERT_TRUE(mapped.ok() && f32.ok());
  EXPECT_TRUE(mapped->matrices_mapped);
  EXPECT_FALSE(f32->matrices_mapped);
  EXPECT_EQ(mapped->head.scalar_type(), at::kBFloat16);
  EXPECT_FALSE(mapped->head.storage().data_ptr().get_context());  // from_blob: no owner, the mapping's memory
  EXPECT_TRUE(at::equal(mapped->layers[1].q_proj.to(at::kFloat), f32->layers[1].q_proj));
  const int64_t V = f32->config.vocab_size;
  std::vector<int64_t> ids;
  for (int64_t n = 0; n < 300; ++n) ids.push_back((n * 7919 + 13) % V);
  const Transformer a(*std::move(mapped)), b(*std::move(f32));
  for (const int64_t T : {int64_t{300}, int64_t{3}}) {  // prefill, and a decode-sized forward
    const at::Tensor x = at::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + T), at::kLong);
    auto la = a.Forward(x, {{nullptr, 0, T}}), lb = b.Forward(x, {{nullptr, 0, T}});
    ASSERT_TRUE(la.ok() && lb.ok());
    const double peak = lb->abs().max().item<double>(), err = (*la - *lb).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * peak) << T << " tokens: max |bf16 mapped - f32| " << err << ", peak " << peak;
  }
  EXPECT_EQ(a.Fingerprint(), a.Fingerprint());
}

// The fingerprint tells two checkpoints of the same shapes apart, and is
// stable across loads.
TEST_F(GptOssWeightsTest, FingerprintSeesTheCheckpoint) {
  auto a1 = LoadCheckpoint(Model("a"));
  auto a2 = LoadCheckpoint(Model("a"));
  auto b = LoadCheckpoint(Model("b"));
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(ModelFingerprint(*a1), ModelFingerprint(*a2));
  EXPECT_NE(ModelFingerprint(*a1), ModelFingerprint(*b));
}

TEST_F(GptOssWeightsTest, SavingInPdservesLayoutIsRefused) {
  auto w = LoadCheckpoint(Model("a"));
  ASSERT_TRUE(w.ok()) << w.status();
  const absl::Status st = SaveCheckpoint(*w, dir_->Sub("saved"), StDtype::kF32);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_FALSE(std::filesystem::exists(dir_->Sub("saved") + "/model.safetensors"));
}

// A shard cut short is one error naming the file, before any weight is built.
TEST_F(GptOssWeightsTest, ATruncatedShardIsRefusedByName) {
  testing::TempDir dir;
  const std::string m = dir.Sub("m");
  ASSERT_TRUE(testing::MakeTinyGptOss(m, dir.Sub("log"), 13));
  const std::string shard = m + "/model-00001-of-00003.safetensors";
  ASSERT_TRUE(std::filesystem::exists(shard));
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  auto w = LoadCheckpoint(m);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("model-00001-of-00003.safetensors"), std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace pdserve
