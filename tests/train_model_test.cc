// TrainModel (pdserve-train's batched, differentiable forward) against the
// serving Transformer: the same logits within 1e-4 in fp32, on windowed and
// global layers, at positions past the window, on both of TrainModel's
// windowed paths (a full masked T x T, and blocks of 2W keys).
#include "train/train_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/model/transformer.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

// Sinks inside and outside the clamp range, so the clamp is exercised.
ModelWeights Weights(const ModelConfig& c, uint64_t seed) {
  ModelWeights w = RandomWeights(c, seed);
  for (LayerWeights& L : w.layers) L.sink_bias = at::linspace(-14.0, 18.0, c.n_heads);
  return w;
}

// Max |TrainModel - Transformer| over every row of a [B, T] batch.
double MaxLogitDiff(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  ModelWeights w = Weights(c, seed);
  Transformer serving(w);
  TrainModel train(w);
  at::manual_seed(static_cast<int64_t>(seed));
  const at::Tensor ids = at::randint(0, c.vocab_size, {B, T}, at::kLong);
  const at::Tensor got = train.Forward(ids).logits.detach();
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{B, T, c.vocab_size}));
  double worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    ForwardOptions fo;
    fo.all_logits = true;
    absl::StatusOr<at::Tensor> want = serving.Forward(ids[b], {Segment{nullptr, 0, T}}, fo);
    EXPECT_TRUE(want.ok()) << want.status();
    if (!want.ok()) return 1e9;
    worst = std::max(worst, (got[b] - *want).abs().max().item<double>());
  }
  return worst;
}

TEST(TrainModelTest, LogitsEqualTheServingTransformerPastTheWindow) {
  const ModelConfig c = testing::TinyConfig();  // window 8
  // T = 40: blocks of 2W keys on the windowed layers, 5 windows deep.
  EXPECT_LT(MaxLogitDiff(c, 3, 40, 1), 1e-4);
  // T = 37: a last block that is padded.
  EXPECT_LT(MaxLogitDiff(c, 2, 37, 2), 1e-4);
  // T = 12 (<= 2W): the masked T x T path, still past the window.
  EXPECT_LT(MaxLogitDiff(c, 2, 12, 3), 1e-4);
}

TEST(TrainModelTest, LogitsEqualWithYarnGqaAndSharedExperts) {
  ModelConfig c = testing::TinyConfig();
  c.yarn.factor = 4;
  c.yarn.original_max_position = 16;
  c.n_heads = 8;  // n_rep = 4
  c.n_shared_experts = 2;
  c.rope_identity_pairs_global = 8;  // every pair: no rotation on global layers
  EXPECT_LT(MaxLogitDiff(c, 2, 50, 4), 1e-4);
}

TEST(TrainModelTest, Bf16MatmulsStayClose) {
  const ModelConfig c = testing::TinyConfig();
  ModelWeights w = Weights(c, 5);
  TrainModel f32(w), bf16(w, /*bf16_matmuls=*/true);
  // Seeded: the ids must not depend on which tests ran before (shuffled).
  at::manual_seed(5);
  const at::Tensor ids = at::randint(0, c.vocab_size, {16, 30}, at::kLong);
  const at::Tensor a = f32.Forward(ids).logits.detach(), b = bf16.Forward(ids).logits.detach();
  EXPECT_GT((a - b).abs().max().item<double>(), 0.0) << "bf16 operands change the last bits";
  // On average: a token whose two best experts nearly tie may route
  // elsewhere. Over 16 x 30 random tokens the mean difference is 4-7% of
  // the mean logit (seeds 0-11); 5% held only for the ids the declaration
  // order happened to leave in the RNG.
  EXPECT_LT((a - b).abs().mean().item<double>(), 0.10 * a.abs().mean().item<double>());
}

TEST(TrainModelTest, EveryParameterGetsAGradient) {
  const ModelConfig c = testing::TinyConfig();
  TrainModel model(TrainModel::InitWeights(c, 3));
  const at::Tensor ids = at::randint(0, c.vocab_size, {4, 24}, at::kLong);
  TrainModel::Output out = model.Forward(ids);
  const at::Tensor loss = at::cross_entropy_loss(out.logits.narrow(1, 0, 23).reshape({-1, c.vocab_size}),
                                                 ids.narrow(1, 1, 23).reshape({-1})) +
                          0.01 * out.aux_loss;
  loss.backward();
  for (const TrainParam& p : model.Parameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
    // Sinks at 0 are inside the clamp, so they learn too.
    EXPECT_GT(p.tensor.grad().abs().sum().item<double>(), 0.0) << p.name;
  }
  EXPECT_GT(out.aux_loss.item<double>(), 0.0);
}

TEST(TrainModelTest, InitIsAFunctionOfTheSeed) {
  const ModelConfig c = testing::TinyConfig();
  ModelWeights a = TrainModel::InitWeights(c, 9), b = TrainModel::InitWeights(c, 9), d = TrainModel::InitWeights(c, 10);
  EXPECT_TRUE(a.layers[1].q_proj.equal(b.layers[1].q_proj));
  EXPECT_FALSE(a.layers[1].q_proj.equal(d.layers[1].q_proj));
  EXPECT_TRUE(a.layers[0].norm1.equal(at::ones({c.d_model})));
}

TEST(TrainModelTest, BadIdsThrow) {
  const ModelConfig c = testing::TinyConfig();
  TrainModel model(TrainModel::InitWeights(c, 3));
  EXPECT_THROW(model.Forward(at::zeros({5}, at::kLong)), c10::Error);
  EXPECT_THROW(model.Forward(at::full({1, 4}, c.vocab_size, at::kLong)), c10::Error);
}

}  // namespace
}  // namespace pdserve
