// Hugging Face gpt-oss config.json (common/model/hf_config.h): the published
// 20b config maps field for field, the aliases and both RoPE spellings are
// read, and every key or value pdserve does not implement is refused by
// name.
#include "common/model/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using nlohmann::json;

// openai/gpt-oss-20b's config.json as published (24 layers, layer_types
// written out below).
json Published20b() {
  json j = json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": false,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
        "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
        "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true,
    "vocab_size": 201088})");
  for (int l = 0; l < 24; ++l) j["layer_types"].push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  return j;
}

constexpr char kGeneration[] = R"({"bos_token_id": 199998, "do_sample": true,
    "eos_token_id": [200002, 199999, 200012], "pad_token_id": 199999, "transformers_version": "4.55.0.dev0"})";

TEST(HfConfigTest, Published20bMapsFieldForField) {
  auto c = ParseHfGptOssConfig(Published20b().dump(), kGeneration);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kGptOss);
  EXPECT_EQ(c->vocab_size, 201088);
  EXPECT_EQ(c->d_model, 2880);
  EXPECT_EQ(c->expert_hidden, 2880);
  EXPECT_EQ(c->n_layers, 24);
  EXPECT_EQ(c->n_heads, 64);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->n_experts, 32);
  EXPECT_EQ(c->top_k, 4);
  EXPECT_EQ(c->n_shared_experts, 0);
  EXPECT_EQ(c->window, 128);
  EXPECT_EQ(c->max_context, 131072);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->yarn.factor, 32.0);
  EXPECT_EQ(c->yarn.original_max_position, 4096);
  EXPECT_EQ(c->yarn.beta_fast, 32.0);
  EXPECT_EQ(c->yarn.beta_slow, 1.0);
  EXPECT_FALSE(c->yarn.truncate);
  EXPECT_EQ(c->rope_identity_pairs_global, 0);
  EXPECT_TRUE(std::isinf(c->sink_clamp_lo) && c->sink_clamp_lo < 0);
  EXPECT_TRUE(std::isinf(c->sink_clamp_hi) && c->sink_clamp_hi > 0);
  EXPECT_EQ(c->norm_eps, 1e-5);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->expert_format, ExpertFormat::kMxfp4);
  EXPECT_EQ(c->tokenizer, TokenizerType::kBpe);
  EXPECT_EQ(c->tokenizer_file, "tokenizer.json");
  EXPECT_EQ(c->chat_format, ChatFormat::kHarmony);
  EXPECT_EQ(c->eos_token_id, 200002);
  EXPECT_EQ(c->stop_token_ids, (std::vector<int64_t>{199999, 200012}));
}

TEST(HfConfigTest, AliasesAndTheNewerRopeParametersAreRead) {
  json j = Published20b();
  j.erase("experts_per_token");  // num_experts_per_tok alone
  auto c = ParseHfGptOssConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->top_k, 4);
  j = Published20b();
  j.erase("num_experts_per_tok");  // experts_per_token alone
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 50000.0;
  j["rope_parameters"]["factor"] = 8.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  c = ParseHfGptOssConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->top_k, 4);
  EXPECT_EQ(c->rope_theta, 50000.0);
  EXPECT_EQ(c->yarn.factor, 8.0);
  EXPECT_FALSE(c->stop_token_ids.size());  // no generation_config.json: the config's eos only
  EXPECT_EQ(c->eos_token_id, 200002);
}

TEST(HfConfigTest, WhatPdserveDoesNotImplementIsRefusedByName) {
  struct Case {
    const char* what;
    void (*edit)(json&);
    const char* message;
  };
  const Case cases[] = {
      {"unknown key", [](json& j) { j["sliding_window_pattern"] = 2; }, "'sliding_window_pattern'"},
      {"other model", [](json& j) { j["model_type"] = "llama"; }, "model_type \"gpt_oss\""},
      {"other architecture", [](json& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "'architectures'"},
      {"gptq", [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; }, "quant_method \"mxfp4\""},
      {"experts not converted",
       [](json& j) { j["quantization_config"]["modules_to_not_convert"].push_back("model.layers.*.mlp.experts"); },
       "model.layers.*.mlp.experts"},
      {"extra quant key", [](json& j) { j["quantization_config"]["group_size"] = 32; }, "group_size"},
      {"linear rope", [](json& j) { j["rope_scaling"]["rope_type"] = "linear"; }, "\"linear\""},
      {"rope mscale", [](json& j) { j["rope_scaling"]["mscale"] = 1.0; }, "'rope_scaling.mscale'"},
      {"layer pattern", [](json& j) { j["layer_types"][0] = "full_attention"; }, "'layer_types[0]'"},
      {"layer count", [](json& j) { j["layer_types"].erase(0); }, "must list the 24 layers"},
      {"missing size", [](json& j) { j.erase("num_local_experts"); }, "lacks 'num_local_experts'"},
      {"aliases disagree", [](json& j) { j["experts_per_token"] = 2; }, "'experts_per_token' 2"},
      {"no bias", [](json& j) { j["attention_bias"] = false; }, "'attention_bias'"},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, "'hidden_act'"},
      {"bad limit", [](json& j) { j["swiglu_limit"] = 0; }, "'swiglu_limit'"},
      {"other alpha", [](json& j) { j["swiglu_alpha"] = 1.0; }, "'swiglu_alpha'"},
      {"bad eos", [](json& j) { j["eos_token_id"] = 999999; }, "'eos_token_id'"},
      {"both rope keys", [](json& j) { j["rope_parameters"] = j["rope_scaling"]; }, "ambiguous"},
      {"bad size", [](json& j) { j["num_attention_heads"] = 60; }, "'n_heads' (60)"},
  };
  for (const Case& k : cases) {
    json j = Published20b();
    k.edit(j);
    auto c = ParseHfGptOssConfig(j.dump());
    ASSERT_FALSE(c.ok()) << k.what;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << k.what;
    EXPECT_NE(std::string(c.status().message()).find(k.message), std::string::npos)
        << k.what << ": " << c.status();
  }
}

TEST(HfConfigTest, NoQuantizationConfigMeansDenseExperts) {
  json j = Published20b();
  j.erase("quantization_config");
  auto c = ParseHfGptOssConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->expert_format, ExpertFormat::kDense);
}

TEST(HfConfigTest, LoadModelConfigReadsASnapshotDirectory) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("config.json")) << Published20b().dump(2);
  std::ofstream(dir.Sub("generation_config.json")) << kGeneration;
  auto c = LoadModelConfig(dir.Sub("config.json"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kGptOss);
  EXPECT_EQ(c->stop_token_ids, (std::vector<int64_t>{199999, 200012}));
  std::ofstream(dir.Sub("generation_config.json")) << "{\"eos_token_id\": [";
  c = LoadModelConfig(dir.Sub("config.json"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("generation_config.json"), std::string::npos) << c.status();
}

// The generator's checkpoints (scripts/make_gptoss_checkpoint.py), read by
// this loader: two independent readings of the published layout agree.
TEST(HfConfigTest, TheGeneratorsTinyCheckpointsLoad) {
  for (const char* rope : {"", " --rope-parameters"}) {
    testing::TempDir dir;
    const std::string cmd = std::string("/usr/bin/python3 ") + PDSERVE_SOURCE_DIR +
                            "/scripts/make_gptoss_checkpoint.py --preset tiny --seed 3 --out " + dir.Sub("m") + rope +
                            " > " + dir.Sub("log") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto c = LoadModelConfig(dir.Sub("m/config.json"));
    ASSERT_TRUE(c.ok()) << rope << ": " << c.status();
    EXPECT_EQ(c->family, ModelFamily::kGptOss);
    EXPECT_EQ(c->vocab_size, 201088);
    EXPECT_EQ(c->expert_format, ExpertFormat::kMxfp4);
    EXPECT_FALSE(c->yarn.truncate);
    EXPECT_EQ(c->eos_token_id, 200002);
    EXPECT_EQ(c->stop_token_ids, (std::vector<int64_t>{199999, 200012}));
    EXPECT_EQ(c->rope_theta, 150000.0) << rope;
    EXPECT_EQ(c->window, 32);
    EXPECT_EQ(c->yarn.original_max_position, 256);
  }
}

TEST(HfConfigTest, ItsCanonicalJsonIsNotAPdserveConfig) {
  auto c = ParseHfGptOssConfig(Published20b().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  const json canonical = json::parse(c->ToJson());
  EXPECT_EQ(canonical["family"], "gpt_oss");
  EXPECT_EQ(canonical["swiglu_limit"], 7.0);
  EXPECT_EQ(canonical["yarn"]["truncate"], false);
  auto back = ParseModelConfig(c->ToJson());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(std::string(back.status().message()).find("Hugging Face config.json"), std::string::npos)
      << back.status();
  EXPECT_FALSE(IsHfConfig(c->ToJson()));
  EXPECT_TRUE(IsHfConfig(Published20b().dump()));
  EXPECT_FALSE(IsHfConfig("[1, 2]"));
}

}  // namespace
}  // namespace pdserve
