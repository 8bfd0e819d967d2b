#include "common/handoff/kv_wire.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace pdserve {
namespace {

using internal::v1::KvChunk;

// The domain header (kv_transfer.h) survives the wire, sampling included.
TEST(KvHeaderWireTest, DomainHeaderRoundTrips) {
  KvHandoffHeader h;
  h.request_id = "r-7";
  h.layout = KvHandoffLayout::Of(testing::TinyConfig(), KvDtype::kBF16, "fp-B");
  h.prompt_len = 21;
  h.sampling = SamplingParams{0.7f, 0.9f, 40, 99};
  h.total_bytes = 1234;
  const internal::v1::KvHeader wire = KvHeaderToWire(h);
  EXPECT_EQ(wire.dtype(), internal::v1::KV_DTYPE_BF16);
  EXPECT_EQ(wire.n_layers(), static_cast<uint32_t>(testing::TinyConfig().n_layers));
  const KvHandoffHeader back = KvHeaderFromWire(wire);
  EXPECT_EQ(back.request_id, "r-7");
  EXPECT_EQ(back.layout.model_fingerprint, "fp-B");
  EXPECT_EQ(back.layout.dtype, KvDtype::kBF16);
  EXPECT_EQ(back.layout.n_layers, h.layout.n_layers);
  EXPECT_EQ(back.layout.window, h.layout.window);
  EXPECT_EQ(back.layout.n_kv_heads, h.layout.n_kv_heads);
  EXPECT_EQ(back.layout.head_dim, h.layout.head_dim);
  EXPECT_EQ(back.prompt_len, 21);
  EXPECT_EQ(back.total_bytes, 1234);
  EXPECT_FLOAT_EQ(back.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(back.sampling.top_p, 0.9f);
  EXPECT_EQ(back.sampling.top_k, 40);
  EXPECT_EQ(back.sampling.seed, 99u);
  // Rows per layer: windowed (even) layers hold at most `window`.
  EXPECT_EQ(back.layout.Rows(0, 21), std::min<int64_t>(21, h.layout.window));
  EXPECT_EQ(back.layout.Rows(1, 21), 21);
}

class KvWireTest : public ::testing::TestWithParam<internal::v1::KvDtype> {
 protected:
  void SetUp() override {
    config_ = testing::TinyConfig();  // window 8
    at::manual_seed(1);
    const auto dt = GetParam() == internal::v1::KV_DTYPE_BF16 ? at::kBFloat16 : at::kFloat;
    state_.prompt_len = 13;
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const int64_t rows = HandoffRows(config_, l, 13);
      state_.k.push_back(at::randn({rows, 2, 16}).to(dt));
      state_.v.push_back(at::randn({rows, 2, 16}).to(dt));
    }
    internal::v1::KvHeader h;
    h.set_request_id("r1");
    h.set_model_fingerprint("fp-A");
    h.set_dtype(GetParam());
    h.set_prompt_len(13);
    KvChunkEncoder enc(config_, h, /*max_chunk_bytes=*/100);  // many small chunks
    chunks_.push_back(enc.Header());
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      auto c = enc.Layer(l, state_.k[l], state_.v[l]);
      ASSERT_TRUE(c.ok()) << c.status();
      chunks_.insert(chunks_.end(), c->begin(), c->end());
    }
    auto commit = enc.Commit(42);
    ASSERT_TRUE(commit.ok()) << commit.status();
    chunks_.push_back(*commit);
    limits_.model_fingerprint = "fp-A";
    limits_.max_chunk_bytes = 100;
  }

  // Feeds chunks; returns the first error, or Finish()'s status.
  absl::Status Feed(const std::vector<KvChunk>& chunks, KvHandoffState* out = nullptr) {
    KvChunkDecoder dec(config_, limits_);
    for (const KvChunk& c : chunks) {
      absl::Status st = dec.Accept(c);
      if (!st.ok()) return st;
    }
    auto s = dec.Finish();
    if (s.ok() && out != nullptr) *out = *s;
    return s.status();
  }

  void ExpectRejected(const std::vector<KvChunk>& chunks, const std::string& why) {
    absl::Status st = Feed(chunks);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(std::string(st.message()).find(why), std::string::npos) << st;
  }

  ModelConfig config_;
  KvHandoffState state_;
  std::vector<KvChunk> chunks_;
  KvReceiveLimits limits_;
};

TEST_P(KvWireTest, RoundTripsLayerByLayerInBoundedChunks) {
  EXPECT_GT(chunks_.size(), 20u);
  EXPECT_EQ(chunks_[0].header().n_chunks(), chunks_.size() - 2);
  for (size_t i = 1; i + 1 < chunks_.size(); ++i) EXPECT_LE(chunks_[i].data().payload().size(), 100u);
  EXPECT_EQ(chunks_.back().commit().first_token(), 42u);
  KvHandoffState got;
  ASSERT_TRUE(Feed(chunks_, &got).ok());
  EXPECT_EQ(got.prompt_len, 13);
  ASSERT_EQ(got.k.size(), 4u);
  EXPECT_EQ(got.k[0].size(0), 8);   // windowed: last min(T, W) rows
  EXPECT_EQ(got.k[1].size(0), 13);  // global: all rows
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_TRUE(at::equal(got.k[l], state_.k[l]));
    EXPECT_TRUE(at::equal(got.v[l], state_.v[l]));
  }
  EXPECT_EQ(got.Bytes(), static_cast<int64_t>(chunks_[0].header().total_bytes()));
}

TEST_P(KvWireTest, WrongFingerprintIsRejected) {
  limits_.model_fingerprint = "fp-B";
  ExpectRejected(chunks_, "fingerprint");
}

TEST_P(KvWireTest, CorruptedChunkFailsItsChecksum) {
  auto bad = chunks_;
  (*bad[5].mutable_data()->mutable_payload())[3] ^= 0x40;
  ExpectRejected(bad, "chunk 5 fails its checksum");
}

TEST_P(KvWireTest, TruncatedStreamIsRejected) {
  auto bad = chunks_;
  bad.pop_back();
  ExpectRejected(bad, "no commit");
  bad.pop_back();
  ExpectRejected(bad, "truncated");
  // A commit where data should be.
  auto early = chunks_;
  early.erase(early.end() - 2);
  ExpectRejected(early, "out of order");
}

TEST_P(KvWireTest, CommitIsChecked) {
  auto bad = chunks_;
  bad.back().mutable_commit()->set_first_token(7);
  ExpectRejected(bad, "commit fails its checksum");
  bad = chunks_;
  bad.push_back(chunks_.back());
  bad.back().set_seq(bad.back().seq() + 1);
  ExpectRejected(bad, "after the commit");
}

TEST_P(KvWireTest, ReorderedChunksAreRejected) {
  auto bad = chunks_;
  std::swap(bad[3], bad[4]);
  ExpectRejected(bad, "chunk 4 out of order, expected 3");
}

TEST_P(KvWireTest, DuplicatedChunkIsRejected) {
  auto bad = chunks_;
  bad.insert(bad.begin() + 4, bad[3]);
  ExpectRejected(bad, "duplicate chunk 3");
}

TEST_P(KvWireTest, HeaderSizesAreCheckedBeforeAllocating) {
  auto bad = chunks_;
  bad[0].mutable_header()->set_prompt_len(1'000'000'000);
  ExpectRejected(bad, "checksum");  // tampering breaks the header checksum first
  limits_.max_prompt_len = 10;
  ExpectRejected(chunks_, "prompt_len 13 outside [1, 10]");
  limits_.max_prompt_len = 131072;
  limits_.max_total_bytes = 1000;
  ExpectRejected(chunks_, "exceed this worker's limit");
  limits_.max_total_bytes = int64_t{1} << 30;
  ModelConfig other = config_;
  other.window = 16;
  KvChunkDecoder dec(other, limits_);
  absl::Status st = dec.Accept(chunks_[0]);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("model shape"), std::string::npos) << st;
}

TEST_P(KvWireTest, EncoderRejectsWrongShapesAndOrder) {
  internal::v1::KvHeader h;
  h.set_dtype(GetParam());
  h.set_prompt_len(13);
  KvChunkEncoder enc(config_, h);
  EXPECT_EQ(enc.Layer(1, state_.k[1], state_.v[1]).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(enc.Layer(0, state_.k[1], state_.v[1]).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(enc.Commit(1).status().code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvWireTest,
                         ::testing::Values(internal::v1::KV_DTYPE_F32, internal::v1::KV_DTYPE_BF16));

}  // namespace
}  // namespace pdserve
