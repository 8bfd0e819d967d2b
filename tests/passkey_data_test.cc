// pdserve-train's data: the prompts are pdserve-passkey's own, with the
// answer appended, and everything is drawn per example from its seed.
#include "train/passkey_data.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/passkey/passkey.h"

namespace pdserve {
namespace {

std::string Text(const std::vector<int64_t>& ids, size_t from = 0, size_t n = std::string::npos) {
  std::string s;
  for (size_t i = from; i < ids.size() && i - from < n; ++i) s += static_cast<char>(ids[i]);
  return s;
}

TEST(PasskeyDataTest, ThePromptIsThePasskeyClientsPromptPlusTheAnswer) {
  for (int64_t length : {MinPasskeyPromptTokens(), int64_t{300}, int64_t{512}, int64_t{2048}}) {
    for (int64_t i = 0; i < 20; ++i) {
      absl::StatusOr<PasskeyExample> ex = MakePasskeyExample(ExampleSeed(7, DataStream::kTrain, length, i), length);
      ASSERT_TRUE(ex.ok()) << ex.status();
      ASSERT_LE(ex->prompt_tokens, length);
      EXPECT_GT(ex->prompt_tokens, length - 9) << "within one filler word of the length";
      ASSERT_EQ(static_cast<int64_t>(ex->ids.size()), ex->prompt_tokens + kPasskeyAnswerTokens);
      const std::string prompt = Text(ex->ids, 0, ex->prompt_tokens);
      EXPECT_EQ(Text(ex->ids, ex->prompt_tokens), " " + ex->passkey + ".");
      EXPECT_NE(prompt.find("The passkey is " + ex->passkey + ". Remember it. " + ex->passkey + " is the passkey."),
                std::string::npos);
      EXPECT_EQ(prompt.rfind("What is the passkey? The passkey is"), prompt.size() - 35);
      EXPECT_EQ(prompt.find("There is an important info hidden inside a lot of irrelevant text."), 0u);
      EXPECT_EQ(ExtractPasskeyAnswer(Text(ex->ids, ex->prompt_tokens)), ex->passkey);
    }
  }
}

TEST(PasskeyDataTest, FillerOrderDepthAndPasskeyVaryPerExample) {
  std::set<std::string> fillers, passkeys;
  std::set<int> depth_tenths;
  for (int64_t i = 0; i < 200; ++i) {
    absl::StatusOr<PasskeyExample> ex = MakePasskeyExample(ExampleSeed(1, DataStream::kTrain, 3, i), 600);
    ASSERT_TRUE(ex.ok());
    std::string prompt = Text(ex->ids, 0, ex->prompt_tokens);
    const size_t at = prompt.find("The passkey is");
    prompt.erase(at, 56);  // the sentence with its two passkeys
    fillers.insert(prompt);
    passkeys.insert(ex->passkey);
    depth_tenths.insert(static_cast<int>(ex->depth * 10));
  }
  EXPECT_GT(fillers.size(), 190u) << "filler order and depth are drawn per example, not per length";
  EXPECT_GT(passkeys.size(), 195u);
  EXPECT_EQ(depth_tenths.size(), 10u) << "depths cover [0, 1]";
}

TEST(PasskeyDataTest, SeedsDecideEverythingAndStreamsNeverMeet) {
  absl::StatusOr<PasskeyExample> a = MakePasskeyExample(ExampleSeed(1, DataStream::kTrain, 5, 2), 400);
  absl::StatusOr<PasskeyExample> b = MakePasskeyExample(ExampleSeed(1, DataStream::kTrain, 5, 2), 400);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  std::set<uint64_t> train, eval;
  for (int64_t step = 0; step < 100; ++step) {
    for (int64_t i = 0; i < 32; ++i) {
      train.insert(ExampleSeed(1, DataStream::kTrain, step, i));
      eval.insert(ExampleSeed(1, DataStream::kEval, step, i));
    }
  }
  EXPECT_EQ(train.size(), 3200u);
  for (uint64_t s : eval) EXPECT_EQ(train.count(s), 0u);
}

TEST(PasskeyDataTest, TooShortALengthIsRefused) {
  absl::StatusOr<PasskeyExample> ex = MakePasskeyExample(1, MinPasskeyPromptTokens() - 1);
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PasskeyDataTest, CurriculumGrowsFromShortToLong) {
  const int64_t lo = 250, hi = 512;
  for (int64_t step = 0; step < 2000; step += 7) {
    const int64_t n = CurriculumLength(1, step, lo, hi, 1000);
    EXPECT_GE(n, lo);
    EXPECT_LE(n, step >= 1000 ? hi : lo + (hi - lo) * step / 1000);
  }
  int64_t longest = 0;
  for (int64_t step = 1000; step < 1200; ++step) longest = std::max(longest, CurriculumLength(1, step, lo, hi, 1000));
  EXPECT_GT(longest, hi - 10);
}

}  // namespace
}  // namespace pdserve
