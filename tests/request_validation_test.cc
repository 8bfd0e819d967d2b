// ValidateGenerateRequest: what the router refuses before it spends a worker.
#include "router/request_validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/net/sampling_validation.h"
#include "common/tokenizer/byte_tokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {
namespace {

class RequestValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.vocab_size = 300;
    config_.max_context = 100;
    auto tok = ByteTokenizer::Create(config_.vocab_size);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }

  // A valid request: a 5-byte text prompt, 10 new tokens, default sampling.
  static pdserve::v1::GenerateRequest Valid() {
    pdserve::v1::GenerateRequest r;
    r.set_text("hello");
    r.mutable_sampling()->set_max_new_tokens(10);
    return r;
  }

  absl::StatusOr<std::vector<uint32_t>> Validate(const pdserve::v1::GenerateRequest& r) const {
    return ValidateGenerateRequest(r, config_, *tokenizer_, limits_);
  }

  // InvalidArgument whose message names every one of `words`, and whose
  // field (the status payload the router sends as the pdserve-param
  // trailer) is `field`.
  void ExpectInvalid(const pdserve::v1::GenerateRequest& r, const std::vector<std::string>& words,
                     const std::string& field) const {
    auto got = Validate(r);
    ASSERT_FALSE(got.ok()) << "accepted: " << r.ShortDebugString();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    const std::string msg(got.status().message());
    EXPECT_GE(msg.size(), 10u) << "not a sentence: " << msg;
    for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    EXPECT_EQ(ErrorField(got.status()), field) << msg;
  }

  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  RequestLimits limits_;  // cap 4096, 8 stops
};

TEST_F(RequestValidationTest, ValidTextReturnsItsUtf8Bytes) {
  auto r = Valid();
  r.set_text("h\xC3\xA9!");  // "hé!": é is two UTF-8 bytes
  auto ids = Validate(r);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<uint32_t>{'h', 0xC3, 0xA9, '!'}));
}

TEST_F(RequestValidationTest, ValidIdsAreReturnedAsGiven) {
  pdserve::v1::GenerateRequest r;
  for (uint32_t id : {0u, 255u, 256u, 299u}) r.add_token_ids(id);
  r.mutable_sampling()->set_max_new_tokens(1);
  auto ids = Validate(r);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<uint32_t>{0, 255, 256, 299}));
}

TEST_F(RequestValidationTest, PromptIsTextXorIds) {
  auto both = Valid();
  both.add_token_ids(1);
  ExpectInvalid(both, {"text", "token_ids"}, "token_ids");

  pdserve::v1::GenerateRequest neither;
  neither.mutable_sampling()->set_max_new_tokens(10);
  ExpectInvalid(neither, {"text", "token_ids"}, "text");
}

TEST_F(RequestValidationTest, IdsMustBeBelowVocabSize) {
  pdserve::v1::GenerateRequest r;
  r.add_token_ids(5);
  r.add_token_ids(299);
  r.add_token_ids(300);  // == vocab_size
  r.add_token_ids(7);
  r.mutable_sampling()->set_max_new_tokens(10);
  ExpectInvalid(r, {"token_ids[2]", "300", "vocab_size"}, "token_ids[2]");

  pdserve::v1::GenerateRequest big;
  big.add_token_ids(4000000000u);
  big.mutable_sampling()->set_max_new_tokens(10);
  ExpectInvalid(big, {"token_ids[0]", "4000000000"}, "token_ids[0]");
}

TEST_F(RequestValidationTest, MaxNewTokensBetweenOneAndTheCap) {
  auto zero = Valid();
  zero.mutable_sampling()->set_max_new_tokens(0);
  ExpectInvalid(zero, {"max_new_tokens"}, "sampling.max_new_tokens");

  auto no_sampling = Valid();
  no_sampling.clear_sampling();
  ExpectInvalid(no_sampling, {"max_new_tokens"}, "sampling.max_new_tokens");

  limits_.max_new_tokens_cap = 50;
  auto above = Valid();
  above.mutable_sampling()->set_max_new_tokens(51);
  ExpectInvalid(above, {"max_new_tokens", "51", "50"}, "sampling.max_new_tokens");

  auto at_cap = Valid();
  at_cap.mutable_sampling()->set_max_new_tokens(50);
  EXPECT_TRUE(Validate(at_cap).ok());
}

TEST_F(RequestValidationTest, PromptPlusNewTokensWithinMaxContext) {
  // 5 prompt bytes + 95 = 100 = max_context: fits exactly.
  auto fits = Valid();
  fits.mutable_sampling()->set_max_new_tokens(95);
  EXPECT_TRUE(Validate(fits).ok()) << Validate(fits).status();

  auto over = Valid();
  over.mutable_sampling()->set_max_new_tokens(96);
  ExpectInvalid(over, {"max_context", "100", "max_new_tokens"}, "sampling.max_new_tokens");

  // A prompt alone longer than the context.
  auto long_prompt = Valid();
  long_prompt.set_text(std::string(100, 'a'));
  long_prompt.mutable_sampling()->set_max_new_tokens(1);
  ExpectInvalid(long_prompt, {"max_context"}, "text");

  // The same with ids.
  pdserve::v1::GenerateRequest ids;
  for (int i = 0; i < 60; ++i) ids.add_token_ids(1);
  ids.mutable_sampling()->set_max_new_tokens(41);
  ExpectInvalid(ids, {"max_context"}, "sampling.max_new_tokens");  // 60 ids leave room for some

  pdserve::v1::GenerateRequest full;  // 100 ids fill the context alone
  for (int i = 0; i < 100; ++i) full.add_token_ids(1);
  full.mutable_sampling()->set_max_new_tokens(1);
  ExpectInvalid(full, {"max_context"}, "token_ids");
}

// docs/design.md and the proto: temperature <= 0 is greedy. Only NaN and
// infinities are refused.
TEST_F(RequestValidationTest, TemperatureFiniteAndNegativeIsGreedy) {
  auto nan = Valid();
  nan.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(nan, {"temperature"}, "sampling.temperature");

  auto inf = Valid();
  inf.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  ExpectInvalid(inf, {"temperature"}, "sampling.temperature");

  for (float t : {-1.0f, -0.1f, 0.0f, 0.7f, 2.0f}) {
    auto ok = Valid();
    ok.mutable_sampling()->set_temperature(t);
    EXPECT_TRUE(Validate(ok).ok()) << "temperature " << t;
  }
}

TEST_F(RequestValidationTest, TopPInUnitInterval) {
  auto above = Valid();
  above.mutable_sampling()->set_top_p(1.01f);
  ExpectInvalid(above, {"top_p"}, "sampling.top_p");

  auto below = Valid();
  below.mutable_sampling()->set_top_p(-0.5f);
  ExpectInvalid(below, {"top_p"}, "sampling.top_p");

  auto nan = Valid();
  nan.mutable_sampling()->set_top_p(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(nan, {"top_p"}, "sampling.top_p");

  for (float p : {0.0f, 0.5f, 1.0f}) {
    auto ok = Valid();
    ok.mutable_sampling()->set_top_p(p);
    EXPECT_TRUE(Validate(ok).ok()) << "top_p " << p;
  }
}

TEST_F(RequestValidationTest, StopSequencesNonEmptyAndFew) {
  auto empty = Valid();
  empty.mutable_sampling()->add_stop("END");
  empty.mutable_sampling()->add_stop("");
  ExpectInvalid(empty, {"stop[1]", "empty"}, "sampling.stop[1]");

  limits_.max_stop_sequences = 3;
  auto many = Valid();
  for (int i = 0; i < 4; ++i) many.mutable_sampling()->add_stop("s" + std::to_string(i));
  ExpectInvalid(many, {"stop", "4", "3"}, "sampling.stop");

  auto enough = Valid();
  for (int i = 0; i < 3; ++i) enough.mutable_sampling()->add_stop("s" + std::to_string(i));
  EXPECT_TRUE(Validate(enough).ok()) << Validate(enough).status();
}

TEST_F(RequestValidationTest, DefaultLimitsAllowEightStops) {
  auto eight = Valid();
  for (int i = 0; i < 8; ++i) eight.mutable_sampling()->add_stop("s" + std::to_string(i));
  EXPECT_TRUE(Validate(eight).ok());
  eight.mutable_sampling()->add_stop("s8");
  ExpectInvalid(eight, {"stop"}, "sampling.stop");
}

TEST(IdsOnlyTokenizerValidationTest, TextIsUnimplementedIdsWork) {
  ModelConfig config;
  config.vocab_size = 300;
  config.max_context = 100;
  auto tok = MakeIdsOnlyTokenizer(config.vocab_size, "no tokenizer for this model");
  RequestLimits limits;

  pdserve::v1::GenerateRequest text;
  text.set_text("hello");
  text.mutable_sampling()->set_max_new_tokens(4);
  auto t = ValidateGenerateRequest(text, config, *tok, limits);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << t.status();
  EXPECT_NE(std::string(t.status().message()).find("no tokenizer for this model"), std::string::npos)
      << t.status();
  EXPECT_EQ(ErrorField(t.status()), "text");

  pdserve::v1::GenerateRequest ids;
  ids.add_token_ids(3);
  ids.add_token_ids(299);
  ids.mutable_sampling()->set_max_new_tokens(4);
  auto i = ValidateGenerateRequest(ids, config, *tok, limits);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(*i, (std::vector<uint32_t>{3, 299}));

  // The other checks still apply.
  ids.add_token_ids(300);
  auto bad = ValidateGenerateRequest(ids, config, *tok, limits);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

}  // namespace
}  // namespace pdserve
