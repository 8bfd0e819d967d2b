// GptOssCheckpoint (common/model/gptoss_checkpoint.h): the generator's tiny
// checkpoint passes, in BF16 and with F32 norms, sinks and biases; a
// tensor missing, of another shape or dtype, or an e8m0 scale out of range
// is one line naming the tensor and the file.
#include "common/model/gptoss_checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/model/hf_config.h"
#include "tests/gptoss_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

std::string Generate(const testing::TempDir& dir, const std::string& extra) {
  const std::string out = dir.Sub("m");
  EXPECT_TRUE(testing::MakeTinyGptOss(out, dir.Sub("log"), 6, extra)) << extra;
  return out;
}

TEST(GptOssCheckpointTest, TheGeneratorsTinyCheckpointPasses) {
  for (const char* extra : {"", "--f32 norms,sinks,biases"}) {
    testing::TempDir dir;
    const std::string m = Generate(dir, extra);
    auto config = LoadModelConfig(m + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto ckpt = GptOssCheckpoint::Open(m, *config);
    ASSERT_TRUE(ckpt.ok()) << extra << ": " << ckpt.status();
    const StTensorView* q = (*ckpt)->Find("model.layers.1.self_attn.q_proj.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->shape, (std::vector<int64_t>{config->n_heads * config->head_dim, config->d_model}));
    const StTensorView* sinks = (*ckpt)->Find("model.layers.0.self_attn.sinks");
    ASSERT_NE(sinks, nullptr);
    EXPECT_EQ(sinks->dtype, std::string(extra).empty() ? StDtype::kBF16 : StDtype::kF32) << extra;
    EXPECT_EQ((*ckpt)->Find("model.layers.0.not_a_tensor"), nullptr);
  }
}

// A small gpt-oss config and a one-file checkpoint of zeros in its layout,
// for the damaged cases.
ModelConfig SmallConfig() {
  auto c = ParseHfGptOssConfig(R"({"model_type": "gpt_oss", "vocab_size": 64, "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
      "head_dim": 32, "num_local_experts": 2, "num_experts_per_tok": 1, "sliding_window": 8,
      "max_position_embeddings": 1024,
      "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}})");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

struct Tensors {
  std::vector<StTensorToWrite> list;
  std::vector<std::vector<uint8_t>> data;
};

Tensors ZeroTensors(const ModelConfig& c) {
  Tensors t;
  auto specs = GptOssTensorSpecs(c);
  EXPECT_TRUE(specs.ok()) << specs.status();
  for (const GptOssTensorSpec& s : *specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    const StDtype dtype = s.kind == GptOssTensorSpec::Kind::kU8 ? StDtype::kU8 : StDtype::kBF16;
    t.data.emplace_back(n * StDtypeSize(dtype), 0);
    if (s.e8m0_scales) std::fill(t.data.back().begin(), t.data.back().end(), uint8_t{120});
    t.list.push_back({s.name, dtype, s.shape, nullptr, t.data.back().size()});
  }
  for (size_t i = 0; i < t.list.size(); ++i) t.list[i].data = t.data[i].data();
  return t;
}

StTensorToWrite* Named(Tensors& t, const std::string& name) {
  for (StTensorToWrite& w : t.list) {
    if (w.name == name) return &w;
  }
  ADD_FAILURE() << name;
  return &t.list[0];
}

// The bytes of a tensor to write, to damage them.
uint8_t* Bytes(Tensors& t, const std::string& name) {
  return static_cast<uint8_t*>(const_cast<void*>(Named(t, name)->data));
}

TEST(GptOssCheckpointTest, DamagedTensorsAreRefusedWithOneLine) {
  const ModelConfig c = SmallConfig();
  {
    testing::TempDir dir;
    Tensors t = ZeroTensors(c);
    ASSERT_TRUE(WriteSafetensors(dir.Sub("model.safetensors"), t.list).ok());
    auto ok = GptOssCheckpoint::Open(dir.path(), c);
    ASSERT_TRUE(ok.ok()) << ok.status();
  }
  struct Case {
    const char* what;
    void (*damage)(Tensors& t);
    const char* message;
  };
  const Case cases[] = {
      {"missing", [](Tensors& t) { t.list.erase(t.list.begin() + 3); }, "lacks tensor"},
      {"shape",
       [](Tensors& t) {
         StTensorToWrite* w = Named(t, "model.layers.1.mlp.router.bias");
         w->shape = {1};
         w->nbytes = 2;
       },
       "'model.layers.1.mlp.router.bias' in"},
      {"float dtype",
       [](Tensors& t) { Named(t, "model.layers.0.self_attn.sinks")->dtype = StDtype::kF16; },
       "is F16 [2]; the config says BF16 or F32 [2]"},
      {"blocks as floats",
       [](Tensors& t) {
         StTensorToWrite* w = Named(t, "model.layers.0.mlp.experts.down_proj_blocks");
         w->dtype = StDtype::kBF16;
         w->shape = {2, 64, 1, 8};
       },
       "'model.layers.0.mlp.experts.down_proj_blocks'"},
      {"NaN scale", [](Tensors& t) { Bytes(t, "model.layers.1.mlp.experts.gate_up_proj_scales")[5] = 255; },
       "scale byte 255 at element 5 (NaN)"},
      {"huge scale", [](Tensors& t) { Bytes(t, "model.layers.0.mlp.experts.down_proj_scales")[0] = 200; },
       "scale byte 200 at element 0"},
  };
  for (const Case& k : cases) {
    testing::TempDir dir;
    Tensors t = ZeroTensors(c);
    k.damage(t);
    ASSERT_TRUE(WriteSafetensors(dir.Sub("model.safetensors"), t.list).ok()) << k.what;
    auto ckpt = GptOssCheckpoint::Open(dir.path(), c);
    ASSERT_FALSE(ckpt.ok()) << k.what;
    EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss) << k.what;
    const std::string msg(ckpt.status().message());
    EXPECT_NE(msg.find(k.message), std::string::npos) << k.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << k.what;
  }
}

TEST(GptOssCheckpointTest, ConfigsItCannotDescribeAreRefused) {
  ModelConfig lite;
  EXPECT_EQ(GptOssTensorSpecs(lite).status().code(), absl::StatusCode::kInvalidArgument);
  ModelConfig dense = SmallConfig();
  dense.expert_format = ExpertFormat::kDense;
  EXPECT_NE(std::string(GptOssTensorSpecs(dense).status().message()).find("dense"), std::string::npos);
  ModelConfig odd = SmallConfig();
  odd.expert_hidden = 48;
  EXPECT_NE(std::string(GptOssTensorSpecs(odd).status().message()).find("multiples of 32"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
