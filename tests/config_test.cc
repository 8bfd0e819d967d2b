#include "common/model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "tests/test_util.h"

namespace pdserve {
namespace {

TEST(ConfigTest, DefaultConfigHasTheSpecParameterCounts) {
  ModelConfig c;  // defaults are gpt-oss-lite-502m
  EXPECT_EQ(c.TotalParams(), 501836640);
  EXPECT_EQ(c.ActiveParams(), 247032672);
  EXPECT_EQ(c.KvBytesPerTokenPerLayer(2), 1536);
}

TEST(ConfigTest, ShippedDefaultConfigParsesToTheSameCounts) {
  auto c = LoadModelConfig(std::string(PDSERVE_SOURCE_DIR) + "/configs/gpt-oss-lite-502m.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->TotalParams(), 501836640);
  EXPECT_EQ(c->ActiveParams(), 247032672);
  EXPECT_EQ(c->tokenizer, TokenizerType::kBpe);
  EXPECT_EQ(c->tokenizer_file, "tokenizer.json");
  EXPECT_FALSE(c->eos_token_id.has_value());
}

TEST(ConfigTest, RoundTripsThroughJson) {
  ModelConfig c = testing::TinyConfig();
  c.eos_token_id = 7;
  auto back = ParseModelConfig(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c.ToJson());
}

TEST(ConfigTest, ChatTemplateParsesAndRoundTrips) {
  auto c = ParseModelConfig(R"({"chat_template": {"roles": {"user": {"prefix": "U: ", "suffix": "\n"},
      "assistant": {"prefix": "A: "}}, "generation_prefix": "A: "}})");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->chat_template.has_value());
  EXPECT_EQ(c->chat_template->roles.at("user").prefix, "U: ");
  EXPECT_EQ(c->chat_template->roles.at("user").suffix, "\n");
  EXPECT_EQ(c->chat_template->roles.at("assistant").suffix, "");
  EXPECT_EQ(c->chat_template->generation_prefix, "A: ");
  auto back = ParseModelConfig(c->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c->ToJson());
  EXPECT_FALSE(ParseModelConfig("{}")->chat_template.has_value());
}

TEST(ConfigTest, BadChatTemplateNamesTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"chat_template": "chatml"})", "'chat_template'"},
      {R"({"chat_template": {"roles": {}}})", "'chat_template'"},
      {R"({"chat_template": {"roles": {"user": "U: "}}})", "'chat_template.roles.user'"},
      {R"({"chat_template": {"roles": {"user": {"prefix": 3}}}})", "'chat_template.roles.user.prefix'"},
      {R"({"chat_template": {"roles": {"user": {}}, "generation_prefix": []}})", "'chat_template.generation_prefix'"},
  };
  for (const auto& [json, field] : cases) {
    auto c = ParseModelConfig(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_NE(std::string(c.status().message()).find(field), std::string::npos) << c.status();
  }
}

TEST(ConfigTest, HarmonyChatFormatParsesAndRoundTrips) {
  auto c = ParseModelConfig(R"({"tokenizer": {"type": "bpe", "file": "tokenizer.json"}, "chat_format": "harmony"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->chat_format, ChatFormat::kHarmony);
  EXPECT_FALSE(c->chat_template.has_value());
  auto back = ParseModelConfig(c->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->chat_format, ChatFormat::kHarmony);
  EXPECT_EQ(ParseModelConfig("{}")->chat_format, ChatFormat::kTemplate);
  EXPECT_EQ(ParseModelConfig(R"({"chat_format": "template"})")->chat_format, ChatFormat::kTemplate);
}

TEST(ConfigTest, BadChatFormatIsRefusedWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"chat_format": "chatml"})", "must be \"template\" or \"harmony\""},
      {R"({"chat_format": "harmony"})", "needs a BPE tokenizer"},
      {R"({"tokenizer": {"type": "bpe", "file": "t.json"}, "chat_format": "harmony",
           "chat_template": {"roles": {"user": {}}}})",
       "exclude each other"},
  };
  for (const auto& [json, why] : cases) {
    auto c = ParseModelConfig(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_NE(std::string(c.status().message()).find(why), std::string::npos) << c.status();
  }
}

TEST(ConfigTest, AcceptsFlatYarnKeys) {
  auto c = ParseModelConfig(R"({"yarn_factor": 8, "yarn_original_max_position": 2048})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->yarn.factor, 8);
  EXPECT_EQ(c->yarn.original_max_position, 2048);
}

struct BadCase {
  const char* json;
  const char* expect_in_message;
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, NamesTheField) {
  auto c = ParseModelConfig(GetParam().json);
  ASSERT_FALSE(c.ok()) << GetParam().json;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(c.status().message()).find(GetParam().expect_in_message), std::string::npos)
      << c.status();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    ::testing::Values(BadCase{"not json", "not valid JSON"}, BadCase{"[1,2]", "JSON object"},
                      BadCase{R"({"d_model": -4})", "'d_model'"}, BadCase{R"({"d_model": 7.5})", "'d_model'"},
                      BadCase{R"({"n_heads": "8"})", "'n_heads'"},
                      BadCase{R"({"n_heads": 6, "n_kv_heads": 4})", "'n_heads' (6)"},
                      BadCase{R"({"head_dim": 95})", "'head_dim' (95)"},
                      BadCase{R"({"top_k": 9})", "'top_k' (9)"},
                      BadCase{R"({"sink_clamp": [15, -10]})", "'sink_clamp'"},
                      BadCase{R"({"sink_clamp": 3})", "'sink_clamp'"},
                      BadCase{R"({"yarn": 3})", "'yarn'"},
                      BadCase{R"({"yarn": {"factor": 0.5}})", "'yarn.factor'"},
                      BadCase{R"({"rope_identity_pairs_global": 49})", "'rope_identity_pairs_global'"},
                      BadCase{R"({"tokenizer": {"type": "sentencepiece"}})", "'tokenizer.type'"},
                      BadCase{R"({"eos_token_id": 128000})", "'eos_token_id'"}));

// Defect 8 (issue 12): size fields are checked against config.h's hard
// limits before anything is sized from them (1e9 layers aborted the loader
// with bad_alloc in NamedTensors).
INSTANTIATE_TEST_SUITE_P(
    HardLimits, BadConfigTest,
    ::testing::Values(BadCase{R"({"n_layers": 1000000000})", "'n_layers' must be in [1, 1024], found 1000000000"},
                      BadCase{R"({"n_shared_experts": 1000000000})", "'n_shared_experts' must be in [0, 64]"},
                      BadCase{R"({"vocab_size": 9223372036854775807})", "'vocab_size'"},
                      BadCase{R"({"vocab_size": 18446744073709551615})", "'vocab_size' is out of range"},
                      BadCase{R"({"d_model": 1048576})", "'d_model'"},
                      BadCase{R"({"n_heads": 4096, "n_kv_heads": 4})", "'n_heads'"},
                      BadCase{R"({"head_dim": 8192})", "'head_dim'"},
                      BadCase{R"({"n_experts": 100000, "top_k": 2})", "'n_experts'"},
                      BadCase{R"({"expert_hidden": 1073741824})", "'expert_hidden'"},
                      BadCase{R"({"window": 1099511627776})", "'window'"},
                      BadCase{R"({"max_context": 1099511627776})", "'max_context'"},
                      BadCase{R"({"yarn": {"original_max_position": 1099511627776}})",
                              "'yarn.original_max_position'"},
                      // Every field within its limit, the product far beyond kMaxTotalParams.
                      BadCase{R"({"n_layers": 1024, "n_experts": 1024, "expert_hidden": 262144, "d_model": 65536})",
                              "parameters, above the limit"}));

TEST(ConfigTest, ParameterCountsDoNotOverflow) {
  ModelConfig c;
  c.n_layers = int64_t{1} << 40;
  c.expert_hidden = int64_t{1} << 30;
  c.d_model = int64_t{1} << 20;
  EXPECT_EQ(c.TotalParams(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(c.ActiveParams(), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(ValidateModelConfig(c).ok());
  ModelConfig at_limits;
  at_limits.n_layers = kMaxLayers;
  at_limits.n_experts = kMaxExperts;
  at_limits.top_k = 1;
  at_limits.n_shared_experts = kMaxSharedExperts;
  at_limits.expert_hidden = kMaxExpertHidden;
  at_limits.d_model = kMaxDModel;
  at_limits.vocab_size = kMaxVocabSize;
  at_limits.n_heads = kMaxHeads;
  at_limits.n_kv_heads = kMaxHeads;
  at_limits.head_dim = kMaxHeadDim;
  at_limits.rope_identity_pairs_global = 0;
  EXPECT_GT(at_limits.TotalParams(), kMaxTotalParams);  // counted exactly: the limits cannot overflow
  EXPECT_LT(at_limits.TotalParams(), std::numeric_limits<int64_t>::max());
}

// Defect 8: a 300k-deep value crashed the error path (recursive dump()).
TEST(ConfigTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  for (const std::string& text : {"{\"yarn\": " + deep + "}", "{\"sink_clamp\": " + deep + "}",
                                  "{\"tokenizer\": " + deep + "}", deep, std::string(300000, '{')}) {
    auto c = ParseModelConfig(text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("deeper than 64"), std::string::npos) << c.status().message().substr(0, 200);
    EXPECT_LT(c.status().message().size(), 200u);
  }
  // 64 levels are fine; brackets inside strings are not counted.
  const std::string ok64 = "{\"x\": " + std::string(63, '[') + std::string(63, ']') + ", \"name\": \"[[[[\\\"[[\"}";
  auto c = ParseModelConfig(ok64);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "[[[[\"[[");
}

TEST(ConfigTest, ErrorsQuoteLongValuesBriefly) {
  for (const std::string& text :
       {"{\"d_model\": \"" + std::string(1 << 20, 'x') + "\"}",
        "{\"yarn\": [" + std::string(1 << 20, '1') + "]}",
        "{\"sink_clamp\": {\"" + std::string(1 << 20, 'k') + "\": 1}}",
        "{\"tokenizer\": {\"type\": \"" + std::string(1 << 20, 't') + "\"}}",
        "{\"name\": \"" + std::string(1 << 20, 'n') + "\"}"}) {
    auto c = ParseModelConfig(text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(c.status().message().size(), 250u) << c.status().message().substr(0, 300);
  }
  // Cut on a character boundary: "\xC3\xA9" (e-acute) repeated, at every
  // phase.
  for (int pad = 0; pad < 2; ++pad) {
    std::string e_acute;
    for (int i = 0; i < 1000; ++i) e_acute += "\xC3\xA9";
    auto c = ParseModelConfig("{\"d_model\": [\"" + std::string(pad, 'x') + e_acute + "\"]}");
    ASSERT_FALSE(c.ok());
    const std::string m(c.status().message());
    ASSERT_GE(m.size(), 4u);
    EXPECT_EQ(m.substr(m.size() - 3), "...");
    // Valid UTF-8: every lead byte is followed by exactly its continuations.
    size_t i = 0;
    while (i < m.size()) {
      const auto b = static_cast<unsigned char>(m[i]);
      const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
      ASSERT_NE(len, 0u) << "stray continuation byte at " << i << " in " << m;
      ASSERT_LE(i + len, m.size()) << "character cut at " << i << " in " << m;
      for (size_t k = 1; k < len; ++k) ASSERT_EQ(static_cast<unsigned char>(m[i + k]) & 0xC0, 0x80u) << m;
      i += len;
    }
  }
}

TEST(ConfigTest, MissingFileIsNotFound) {
  auto c = LoadModelConfig("/nonexistent/config.json");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST(ConfigTest, FileErrorsNameThePath) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("c.json")) << R"({"window": 0})";
  auto c = LoadModelConfig(dir.Sub("c.json"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("c.json"), std::string::npos);
  EXPECT_NE(std::string(c.status().message()).find("'window'"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
