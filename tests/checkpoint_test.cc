#include "common/model/checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/model/fingerprint.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { weights_ = RandomWeights(testing::TinyConfig(), 5); }

  std::string Save(StDtype dtype = StDtype::kF32) {
    EXPECT_TRUE(SaveCheckpoint(weights_, dir_.path(), dtype).ok());
    return dir_.path();
  }
  std::string Message(const absl::Status& s) { return std::string(s.message()); }

  // Rewrites the checkpoint with `edit` applied to the tensor list.
  void Rewrite(const std::function<void(std::vector<StTensorToWrite>&)>& edit) {
    std::vector<at::Tensor> keep;
    std::vector<StTensorToWrite> out;
    for (const NamedTensor& nt : NamedTensors(&weights_)) {
      at::Tensor t = nt.tensor->contiguous();
      keep.push_back(t);
      out.push_back({nt.name, StDtype::kF32, nt.shape, t.data_ptr(), static_cast<size_t>(t.nbytes())});
    }
    edit(out);
    ASSERT_TRUE(WriteSafetensors(dir_.Sub("model.safetensors"), out).ok());
  }

  ModelWeights weights_;
  testing::TempDir dir_;
};

TEST_F(CheckpointTest, RoundTripIsExactInF32) {
  auto loaded = LoadCheckpoint(Save());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto want = NamedTensors(&weights_);
  auto got = NamedTensors(&*loaded);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].name, got[i].name);
    EXPECT_TRUE(at::equal(*want[i].tensor, *got[i].tensor)) << want[i].name;
  }
  EXPECT_EQ(loaded->config.ToJson(), weights_.config.ToJson());
}

TEST_F(CheckpointTest, HalfPrecisionRoundTripsWithinRounding) {
  for (StDtype dt : {StDtype::kBF16, StDtype::kF16}) {
    auto loaded = LoadCheckpoint(Save(dt));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->embed.scalar_type(), at::kFloat);
    const double tol = dt == StDtype::kBF16 ? 1e-2 : 1e-3;
    EXPECT_TRUE(at::allclose(loaded->embed, weights_.embed, tol, 1e-4)) << StDtypeName(dt);
    EXPECT_TRUE(at::allclose(loaded->layers[1].gate_proj, weights_.layers[1].gate_proj, tol, 1e-4));
  }
}

TEST_F(CheckpointTest, Bf16WeightsOptionKeepsNormsInF32) {
  LoadOptions o;
  o.weights_dtype = WeightsDtype::kBF16;
  auto loaded = LoadCheckpoint(Save(), o);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->layers[0].q_proj.scalar_type(), at::kBFloat16);
  EXPECT_EQ(loaded->layers[0].norm1.scalar_type(), at::kFloat);
  EXPECT_EQ(loaded->layers[0].router.scalar_type(), at::kFloat);
}

TEST_F(CheckpointTest, UntiedHeadAndSeveralSharedExpertsUseTheSpecNames) {
  ModelConfig c = testing::TinyConfig();
  c.tie_embeddings = false;
  c.n_shared_experts = 2;
  weights_ = RandomWeights(c, 1);
  Save();
  auto f = SafetensorsFile::Open(dir_.Sub("model.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_NE((*f)->Find("head.weight"), nullptr);
  EXPECT_NE((*f)->Find("blocks.3.moe.shared.1.down_proj.weight"), nullptr);
  EXPECT_EQ((*f)->Find("blocks.3.moe.shared.down_proj.weight"), nullptr);
  EXPECT_TRUE(LoadCheckpoint(dir_.path()).ok());
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  Save();
  Rewrite([](auto& ts) { ts.erase(ts.begin() + 3); });  // blocks.0.attn.kv_proj.weight
  auto loaded = LoadCheckpoint(dir_.path());
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(loaded.status()).find("missing tensor 'blocks.0.attn.kv_proj.weight'"), std::string::npos)
      << loaded.status();
}

TEST_F(CheckpointTest, WrongShapeNamesExpectedAndFound) {
  Save();
  Rewrite([](auto& ts) {
    for (auto& t : ts) {
      if (t.name == "blocks.2.moe.router.weight") t.shape = {64, 8};
    }
  });
  auto loaded = LoadCheckpoint(dir_.path());
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(loaded.status()).find("'blocks.2.moe.router.weight' has shape [64, 8], expected [8, 64]"),
            std::string::npos)
      << loaded.status();
}

TEST_F(CheckpointTest, WrongDtypeIsNamed) {
  Save();
  // Same bytes, declared as I32: patch the dtype string in the header.
  std::string bytes;
  {
    std::ifstream in(dir_.Sub("model.safetensors"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"norm.weight\":{\"data_offsets\"");
  ASSERT_NE(at, std::string::npos);
  const size_t dt = bytes.find("\"F32\"", at);
  bytes.replace(dt, 5, "\"I32\"");
  std::ofstream(dir_.Sub("model.safetensors"), std::ios::binary) << bytes;
  auto loaded = LoadCheckpoint(dir_.path());
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(loaded.status()).find("'norm.weight' has dtype I32"), std::string::npos) << loaded.status();
}

TEST_F(CheckpointTest, TruncatedFileIsDataLoss) {
  Save();
  const auto path = dir_.Sub("model.safetensors");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  auto loaded = LoadCheckpoint(dir_.path());
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(loaded.status()).find("truncated"), std::string::npos) << loaded.status();
}

TEST_F(CheckpointTest, ConfigThatDisagreesWithTheTensorsNamesATensor) {
  Save();
  ModelConfig c = weights_.config;
  c.d_model = 32;
  std::ofstream(dir_.Sub("config.json")) << c.ToJson();
  auto loaded = LoadCheckpoint(dir_.path());
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(loaded.status()).find("'embed.weight' has shape [300, 64], expected [300, 32]"),
            std::string::npos)
      << loaded.status();
}

TEST_F(CheckpointTest, ExpectedConfigMismatchNamesTheField) {
  Save();
  ModelConfig other = weights_.config;
  other.window = 16;
  LoadOptions o;
  o.expected_config = &other;
  auto loaded = LoadCheckpoint(dir_.path(), o);
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(loaded.status()).find("'window': expected 16, checkpoint has 8"), std::string::npos)
      << loaded.status();
}

TEST_F(CheckpointTest, SavingAMisshapenTensorIsAnError) {
  weights_.layers[0].norm1 = at::ones({3});
  absl::Status st = SaveCheckpoint(weights_, dir_.path(), StDtype::kF32);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(st).find("'blocks.0.norm1.weight' has shape [3], expected [64]"), std::string::npos) << st;
}

TEST_F(CheckpointTest, FingerprintFollowsWeightsNotNames) {
  const std::string fp = ModelFingerprint(weights_);
  EXPECT_EQ(fp.size(), 16u);
  auto loaded = LoadCheckpoint(Save());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(ModelFingerprint(*loaded), fp);  // survives a save/load round trip
  ModelWeights renamed = *loaded;
  renamed.config.name = "other-name";
  EXPECT_EQ(ModelFingerprint(renamed), fp);
  EXPECT_NE(ModelFingerprint(RandomWeights(weights_.config, 6)), fp);  // other weights
  ModelWeights one_off = RandomWeights(weights_.config, 5);
  one_off.layers[3].down_proj[7][1][2] += 1e-3f;  // a single element
  EXPECT_NE(ModelFingerprint(one_off), fp);
  ModelConfig wider = weights_.config;
  wider.sink_clamp_hi = 20;  // same tensors, other math
  ModelWeights other_cfg = weights_;
  other_cfg.config = wider;
  EXPECT_NE(ModelFingerprint(other_cfg), fp);
}

TEST_F(CheckpointTest, MissingDirectoryAndFilesAreNotFound) {
  EXPECT_EQ(LoadCheckpoint("/nonexistent/model").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadCheckpoint(dir_.path()).status().code(), absl::StatusCode::kNotFound);  // empty dir
  Save();
  std::filesystem::remove(dir_.Sub("model.safetensors"));
  EXPECT_EQ(LoadCheckpoint(dir_.path()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pdserve
