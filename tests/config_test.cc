#include "common/model/config.h"

#include <gtest/gtest.h>

#include <fstream>

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
