// ShardedSafetensors (common/model/sharded_safetensors.h) on the layout
// scripts/make_gptoss_checkpoint.py writes (the published gpt-oss one:
// shards numbered from 0, found through model.safetensors.index.json, U8
// MXFP4 blocks and scales), and each bad file refused with one line.
#include "common/model/sharded_safetensors.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The generator's tiny checkpoint (4 shards), written once per process
// (removed at exit with its directory).
const std::string& TinyCheckpoint() {
  static testing::TempDir dir;
  static const std::string path = [] {
    const std::string out = dir.Sub("tiny");
    const std::string cmd = std::string("/usr/bin/python3 ") + PDSERVE_SOURCE_DIR +
                            "/scripts/make_gptoss_checkpoint.py --preset tiny --seed 4 --out " + out + " > " +
                            dir.Sub("log") + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
  }();
  return path;
}

// A copy of the tiny checkpoint that a test may damage.
std::string CopyOf(const testing::TempDir& dir) {
  const std::string out = dir.Sub("copy");
  fs::copy(TinyCheckpoint(), out, fs::copy_options::recursive);
  return out;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

void WriteJson(const std::string& path, const json& j) { std::ofstream(path) << j.dump(1); }

TEST(ShardedSafetensorsTest, FindsEveryTensorOfTheIndexInItsShard) {
  auto s = ShardedSafetensors::Open(TinyCheckpoint());
  ASSERT_TRUE(s.ok()) << s.status();
  const json index = ReadJson(TinyCheckpoint() + "/model.safetensors.index.json");
  EXPECT_EQ((*s)->tensors().size(), index["weight_map"].size());
  EXPECT_EQ((*s)->num_files(), 4u);
  for (const auto& [name, file] : index["weight_map"].items()) {
    ASSERT_NE((*s)->Find(name), nullptr) << name;
    EXPECT_EQ(fs::path((*s)->FileOf(name)).filename(), file.get<std::string>()) << name;
  }
  EXPECT_TRUE(fs::exists(TinyCheckpoint() + "/model-00000-of-00003.safetensors"));  // numbered from 0
  const StTensorView* blocks = (*s)->Find("model.layers.0.mlp.experts.gate_up_proj_blocks");
  const StTensorView* scales = (*s)->Find("model.layers.0.mlp.experts.gate_up_proj_scales");
  ASSERT_NE(blocks, nullptr);
  ASSERT_NE(scales, nullptr);
  EXPECT_EQ(blocks->dtype, StDtype::kU8);
  EXPECT_EQ(blocks->shape, (std::vector<int64_t>{8, 192, 2, 16}));  // [E, 2F, D/32, 16]
  EXPECT_EQ(scales->dtype, StDtype::kU8);
  EXPECT_EQ(scales->shape, (std::vector<int64_t>{8, 192, 2}));
  EXPECT_EQ((*s)->Find("model.embed_tokens.weight")->dtype, StDtype::kBF16);
  EXPECT_EQ((*s)->Find("nope"), nullptr);
  EXPECT_EQ((*s)->FileOf("nope"), "");
}

TEST(ShardedSafetensorsTest, OneModelSafetensorsWithoutAnIndex) {
  testing::TempDir dir;
  const float a[2] = {1, 2};
  ASSERT_TRUE(WriteSafetensors(dir.Sub("model.safetensors"), {{"a", StDtype::kF32, {2}, a, 8}}).ok());
  auto s = ShardedSafetensors::Open(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->num_files(), 1u);
  ASSERT_NE((*s)->Find("a"), nullptr);
  EXPECT_EQ((*s)->Find("a")->shape, (std::vector<int64_t>{2}));
}

TEST(ShardedSafetensorsTest, BadFilesAreRefusedWithOneLine) {
  struct Case {
    const char* what;
    void (*damage)(const std::string& dir);
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"no files", [](const std::string& d) { fs::remove_all(d); fs::create_directories(d); },
       absl::StatusCode::kNotFound, "has neither"},
      {"missing shard", [](const std::string& d) { fs::remove(d + "/model-00001-of-00003.safetensors"); },
       absl::StatusCode::kNotFound, "model-00001-of-00003.safetensors"},
      {"truncated shard",
       [](const std::string& d) {
         const std::string p = d + "/model-00003-of-00003.safetensors";
         fs::resize_file(p, fs::file_size(p) - 1);
       },
       absl::StatusCode::kDataLoss, "model-00003-of-00003.safetensors"},
      {"index names a missing file",
       [](const std::string& d) {
         json j = ReadJson(d + "/model.safetensors.index.json");
         j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
         WriteJson(d + "/model.safetensors.index.json", j);
       },
       absl::StatusCode::kNotFound, "model-00009-of-00009.safetensors"},
      {"tensor not in its shard",
       [](const std::string& d) {
         json j = ReadJson(d + "/model.safetensors.index.json");
         j["weight_map"]["model.layers.0.extra"] = "model-00000-of-00003.safetensors";
         WriteJson(d + "/model.safetensors.index.json", j);
       },
       absl::StatusCode::kDataLoss, "model.layers.0.extra"},
      {"wrong total_size",
       [](const std::string& d) {
         json j = ReadJson(d + "/model.safetensors.index.json");
         j["metadata"]["total_size"] = j["metadata"]["total_size"].get<uint64_t>() + 1;
         WriteJson(d + "/model.safetensors.index.json", j);
       },
       absl::StatusCode::kDataLoss, "total_size"},
      {"file outside the directory",
       [](const std::string& d) {
         json j = ReadJson(d + "/model.safetensors.index.json");
         j["weight_map"]["model.norm.weight"] = "../model-00000-of-00003.safetensors";
         WriteJson(d + "/model.safetensors.index.json", j);
       },
       absl::StatusCode::kInvalidArgument, "a file name in the model directory"},
      {"index not JSON", [](const std::string& d) { std::ofstream(d + "/model.safetensors.index.json") << "{"; },
       absl::StatusCode::kInvalidArgument, "weight_map"},
  };
  for (const Case& k : cases) {
    testing::TempDir dir;
    const std::string d = CopyOf(dir);
    k.damage(d);
    auto s = ShardedSafetensors::Open(d);
    ASSERT_FALSE(s.ok()) << k.what;
    EXPECT_EQ(s.status().code(), k.code) << k.what << ": " << s.status();
    const std::string msg(s.status().message());
    EXPECT_NE(msg.find(k.message), std::string::npos) << k.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << k.what << ": " << msg;
  }
}

}  // namespace
}  // namespace pdserve
