#include "common/passkey/passkey.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace pdserve {
namespace {

// Fake tokenizers: one token per byte (like the byte tokenizer) and one per
// whitespace-separated word (coarser than BPE, but monotone the same way).
absl::StatusOr<int64_t> CountBytes(const std::string& text) { return static_cast<int64_t>(text.size()); }
absl::StatusOr<int64_t> CountWords(const std::string& text) {
  return static_cast<int64_t>(
      std::vector<absl::string_view>(absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())).size());
}

std::string Passkey(const PasskeyPrompt& p) { return p.text.substr(p.passkey_offset, 15 + 5); }

TEST(PasskeyPromptTest, ByteCountIsAtOrJustBelowTheTarget) {
  for (int64_t length : {300, 512, 1000, 4096, 16384, 131072}) {
    int calls = 0;
    absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(length, 0.5, "01234", CountBytes, &calls);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->tokens, static_cast<int64_t>(p->text.size()));
    EXPECT_LE(p->tokens, length);
    EXPECT_GE(p->tokens, length - 8) << "under by more than one filler word and its space";
    // One more word would go over: the largest prompt that fits.
    EXPECT_GT(BuildPasskeyPrompt(length, p->filler_words + 1, 0.5, "01234").text.size(), static_cast<size_t>(length));
    EXPECT_LE(calls, 12) << "length " << length;
  }
}

TEST(PasskeyPromptTest, WordCountHitsTheTargetExactly) {
  for (int64_t length : {100, 777, 2048, 50000}) {
    int calls = 0;
    absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(length, 0.25, "99999", CountWords, &calls);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->tokens, length);
    EXPECT_EQ(*CountWords(p->text), length);
    EXPECT_LE(calls, 8) << "length " << length;
  }
}

TEST(PasskeyPromptTest, TooShortForTheFixedTextIsInvalidArgument) {
  absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(50, 0.5, "12345", CountBytes);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "minimum")) << p.status();
}

TEST(PasskeyPromptTest, ACounterErrorIsReturnedAsIs) {
  TokenCounter broken = [](const std::string&) -> absl::StatusOr<int64_t> {
    return absl::UnavailableError("router down");
  };
  absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(1000, 0.5, "12345", broken);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
}

TEST(PasskeyPromptTest, LayoutFollowsThePaper) {
  PasskeyPrompt p = BuildPasskeyPrompt(1000, 30, 0.5, "04321");
  EXPECT_TRUE(absl::StartsWith(p.text, "There is an important info hidden inside a lot of irrelevant text."));
  EXPECT_TRUE(absl::EndsWith(p.text, "\nWhat is the passkey? The passkey is"));
  EXPECT_TRUE(absl::StrContains(p.text, "\nThe passkey is 04321. Remember it. 04321 is the passkey.\n"));
  EXPECT_EQ(Passkey(p), "The passkey is 04321");
  // The passkey is the only number in the prompt.
  int digits = 0;
  for (char c : p.text) digits += (c >= '0' && c <= '9');
  EXPECT_EQ(digits, 10);
}

TEST(PasskeyPromptTest, StartPutsThePasskeyRightAfterTheTaskDescription) {
  PasskeyPrompt p = BuildPasskeyPrompt(2048, 200, 0.0, "11111");
  EXPECT_EQ(p.filler_words_before, 0);
  const size_t first_line = p.text.find('\n');
  EXPECT_EQ(p.passkey_offset, first_line + 1);
}

TEST(PasskeyPromptTest, EndPutsThePasskeyRightBeforeTheQuestion) {
  // 203 words ends inside a sentence: "end" still means after all filler.
  for (int64_t words : {200, 203}) {
    PasskeyPrompt p = BuildPasskeyPrompt(2048, words, 1.0, "22222");
    EXPECT_EQ(p.filler_words_before, words);
    EXPECT_TRUE(absl::EndsWith(p.text, "The passkey is 22222. Remember it. 22222 is the passkey.\n"
                                       "What is the passkey? The passkey is"));
  }
}

TEST(PasskeyPromptTest, MiddleAndDepthsLandOnTheNearestSentenceBoundary) {
  const int64_t words = 400;
  const std::vector<std::string> filler = FillerWords(4096, words);
  const PasskeyPrompt bare = BuildPasskeyPrompt(4096, 0, 0.5, "33333");
  const int64_t header_words = *CountWords(bare.text.substr(0, bare.passkey_offset));
  for (double depth : {0.1, 0.25, 0.5, 0.75, 0.9}) {
    PasskeyPrompt p = BuildPasskeyPrompt(4096, words, depth, "33333");
    // Sentences have at most 4 words, so a boundary is within 2 of any point.
    EXPECT_NEAR(static_cast<double>(p.filler_words_before), depth * words, 2.0) << depth;
    ASSERT_GT(p.filler_words_before, 0);
    EXPECT_TRUE(absl::EndsWith(filler[p.filler_words_before - 1], ".")) << "not at a sentence end";
    // The text before the passkey is the task description and that many filler words.
    EXPECT_EQ(*CountWords(p.text.substr(0, p.passkey_offset)), header_words + p.filler_words_before);
  }
}

TEST(PasskeyPromptTest, SizedPromptKeepsThePosition) {
  for (const char* name : {"start", "middle", "end", "0.3"}) {
    absl::StatusOr<PasskeyPosition> pos = ParsePasskeyPosition(name);
    ASSERT_TRUE(pos.ok());
    absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(8192, pos->depth, "55555", CountBytes);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NEAR(static_cast<double>(p->filler_words_before), pos->depth * p->filler_words, 2.0) << name;
  }
}

TEST(PasskeyPromptTest, FillerIsDeterministicPerLengthAndGrowsByPrefix) {
  EXPECT_EQ(FillerWords(1024, 500), FillerWords(1024, 500));
  const std::vector<std::string> longer = FillerWords(1024, 800);
  const std::vector<std::string> shorter = FillerWords(1024, 500);
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  EXPECT_NE(FillerWords(1024, 500), FillerWords(2048, 500)) << "seeded by the context length";
  EXPECT_EQ(BuildPasskeyPrompt(1024, 100, 0.5, "12345").text, BuildPasskeyPrompt(1024, 100, 0.5, "12345").text);
  // Only the five neutral sentences, no digits.
  std::set<std::string> vocab(longer.begin(), longer.end());
  for (const std::string& w : vocab) {
    EXPECT_TRUE(w.find_first_of("0123456789") == std::string::npos) << w;
  }
  EXPECT_LE(vocab.size(), 21u);
}

TEST(PasskeyPositionTest, ParsesNamesAndFractions) {
  EXPECT_EQ(ParsePasskeyPosition("start")->depth, 0.0);
  EXPECT_EQ(ParsePasskeyPosition("middle")->depth, 0.5);
  EXPECT_EQ(ParsePasskeyPosition("END")->depth, 1.0);
  EXPECT_EQ(ParsePasskeyPosition("0.25")->depth, 0.25);
  EXPECT_EQ(ParsePasskeyPosition("1")->depth, 1.0);
  EXPECT_FALSE(ParsePasskeyPosition("1.5").ok());
  EXPECT_FALSE(ParsePasskeyPosition("-0.1").ok());
  EXPECT_FALSE(ParsePasskeyPosition("nan").ok());
  EXPECT_FALSE(ParsePasskeyPosition("top").ok());
}

TEST(PasskeyDrawTest, DistinctInRangeAndDeterministic) {
  absl::StatusOr<std::vector<int>> a = DrawPasskeys(1000, 7, 4096);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 1000u);
  EXPECT_EQ(std::set<int>(a->begin(), a->end()).size(), 1000u);
  for (int k : *a) {
    EXPECT_GE(k, 0);
    EXPECT_LT(k, 100000);
  }
  EXPECT_EQ(*a, *DrawPasskeys(1000, 7, 4096));
  // Seeded by base_seed + context_length: only the sum matters.
  EXPECT_EQ(*a, *DrawPasskeys(1000, 4096, 7));
  EXPECT_NE(*a, *DrawPasskeys(1000, 8, 4096));
  // A prefix: more trials extend the same sequence.
  absl::StatusOr<std::vector<int>> few = DrawPasskeys(5, 7, 4096);
  EXPECT_TRUE(std::equal(few->begin(), few->end(), a->begin()));
}

TEST(PasskeyDrawTest, AllOfThemIsAPermutationAndMoreIsAnError) {
  absl::StatusOr<std::vector<int>> all = DrawPasskeys(100000, 0, 1);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(std::set<int>(all->begin(), all->end()).size(), 100000u);
  EXPECT_FALSE(DrawPasskeys(100001, 0, 1).ok());
  EXPECT_FALSE(DrawPasskeys(-1, 0, 1).ok());
  EXPECT_TRUE(DrawPasskeys(0, 0, 1)->empty());
}

TEST(PasskeyDrawTest, FiveDigitsWithLeadingZeros) {
  EXPECT_EQ(FormatPasskey(0), "00000");
  EXPECT_EQ(FormatPasskey(42), "00042");
  EXPECT_EQ(FormatPasskey(1234), "01234");
  EXPECT_EQ(FormatPasskey(99999), "99999");
}

TEST(PasskeyAnswerTest, FirstFiveDigitNumber) {
  EXPECT_EQ(ExtractPasskeyAnswer(" 01234."), "01234");
  EXPECT_EQ(ExtractPasskeyAnswer("12345"), "12345");
  EXPECT_EQ(ExtractPasskeyAnswer("The passkey is 54321. Remember"), "54321");
  EXPECT_EQ(ExtractPasskeyAnswer("(12345)"), "12345");
  EXPECT_EQ(ExtractPasskeyAnswer("12345.6"), "12345") << "'.' is not a word character";
  EXPECT_EQ(ExtractPasskeyAnswer("-12345-"), "12345");
  EXPECT_EQ(ExtractPasskeyAnswer("\xc3\xa9" "12345"), "12345") << "non-ASCII is not a word character";
}

TEST(PasskeyAnswerTest, ExtraDigitsAroundAreNotAnAnswer) {
  EXPECT_EQ(ExtractPasskeyAnswer("123456"), std::nullopt) << "not 12345";
  EXPECT_EQ(ExtractPasskeyAnswer("1234"), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer("0123456789"), std::nullopt);
  // Letters and '_' are word characters: \b does not separate them from digits.
  EXPECT_EQ(ExtractPasskeyAnswer("x12345y"), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer("x12345"), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer("12345y"), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer("_12345"), std::nullopt);
}

TEST(PasskeyAnswerTest, MultipleNumbersAndNone) {
  EXPECT_EQ(ExtractPasskeyAnswer("11111 22222"), "11111");
  EXPECT_EQ(ExtractPasskeyAnswer("123456 and 65432 then 77777"), "65432") << "the first that matches";
  EXPECT_EQ(ExtractPasskeyAnswer("a12345 67890"), "67890");
  EXPECT_EQ(ExtractPasskeyAnswer("1,234 and 12.345"), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer(""), std::nullopt);
  EXPECT_EQ(ExtractPasskeyAnswer("the the the the"), std::nullopt);
}

TEST(WilsonIntervalTest, KnownValues) {
  // Reference values: the closed form evaluated separately in Python (z = 1.959964);
  // 0/10 -> [0, 0.2775] is the textbook example.
  Interval none = WilsonInterval(0, 10);
  EXPECT_NEAR(none.low, 0.0, 1e-12);
  EXPECT_NEAR(none.high, 0.277532, 1e-5);
  Interval all = WilsonInterval(10, 10);
  EXPECT_NEAR(all.low, 0.722468, 1e-5);
  EXPECT_NEAR(all.high, 1.0, 1e-12);
  Interval half = WilsonInterval(5, 10);
  EXPECT_NEAR(half.low, 0.236593, 1e-5);
  EXPECT_NEAR(half.high, 0.763407, 1e-5);
  Interval big = WilsonInterval(85, 100);
  EXPECT_NEAR(big.low, 0.767164, 1e-5);
  EXPECT_NEAR(big.high, 0.906940, 1e-5);
  Interval empty = WilsonInterval(0, 0);
  EXPECT_EQ(empty.low, 0.0);
  EXPECT_EQ(empty.high, 1.0);
}

TEST(QuantileTest, LinearInterpolation) {
  EXPECT_DOUBLE_EQ(Quantile({3, 1, 2}, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(Quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9), 9.1);
  EXPECT_DOUBLE_EQ(Quantile({7}, 0.9), 7.0);
  EXPECT_TRUE(std::isnan(Quantile({}, 0.5)));
}

TEST(VerdictTest, PassAtOrAboveTarget) {
  Verdict v = JudgePasskey({4096, 20, 17, 0, 20}, 0.85, "middle");
  EXPECT_TRUE(v.pass);
  EXPECT_TRUE(absl::StartsWith(v.line, "PASS: passkey retrieval at 4096 tokens (position middle): 17/20")) << v.line;
}

TEST(VerdictTest, RandomModelIsNamedAsTheCause) {
  Verdict v = JudgePasskey({4096, 5, 0, 0, 0}, 0.85, "middle");
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(absl::StartsWith(v.line, "WARNING: ")) << v.line;
  EXPECT_TRUE(absl::StrContains(v.line, "no 5-digit number") || absl::StrContains(v.line, "holds a 5-digit number"))
      << v.line;
  EXPECT_TRUE(absl::StrContains(v.line, "model is the likely cause, not this client")) << v.line;
  // Near 0 even when it does answer with numbers.
  Verdict w = JudgePasskey({4096, 20, 1, 0, 20}, 0.85, "end");
  EXPECT_TRUE(absl::StrContains(w.line, "model is the likely cause")) << w.line;
}

TEST(VerdictTest, FailuresAreReported) {
  Verdict all = JudgePasskey({1024, 3, 0, 3, 0}, 0.85, "start");
  EXPECT_FALSE(all.pass);
  EXPECT_TRUE(absl::StrContains(all.line, "RPC errors")) << all.line;
  Verdict some = JudgePasskey({1024, 4, 3, 1, 3}, 0.5, "start");
  EXPECT_TRUE(some.pass);
  EXPECT_TRUE(absl::StrContains(some.line, "1 RPC failures counted as wrong")) << some.line;
}

}  // namespace
}  // namespace pdserve
