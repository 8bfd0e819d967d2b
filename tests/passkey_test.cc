#include "common/passkey/passkey.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/passkey/passkey_protocol.h"
#include "common/passkey/passkey_trials.h"

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

// ---- The run (passkey_protocol.h, passkey_trials.h).

PasskeyRunSpec SeedSpec() {
  PasskeyRunSpec spec;
  spec.protocol = PasskeyProtocol::kSeed;
  spec.seed = 3;
  spec.lengths = {512, 1024};
  spec.max_new_tokens = 16;
  return spec;
}

TEST(PasskeyProtocolTest, SeedSpreadsTheTrialsOfALengthByIndexModThree) {
  absl::StatusOr<std::vector<PasskeyTrial>> trials = PlanLengthTrials(SeedSpec(), 4096, 100, 300);
  ASSERT_TRUE(trials.ok()) << trials.status();
  std::map<std::string, int> count;
  const char* names[] = {"start", "middle", "end"};
  const double depths[] = {0.0, 0.5, 1.0};
  for (const PasskeyTrial& t : *trials) {
    ++count[t.position.name];
    EXPECT_EQ(t.position.name, names[t.index % 3]) << t.index;
    EXPECT_EQ(t.position.depth, depths[t.index % 3]) << t.index;
  }
  EXPECT_EQ(count, (std::map<std::string, int>{{"start", 34}, {"middle", 33}, {"end", 33}}));
  // 100 distinct passkeys, DrawPasskeys' own.
  std::set<std::string> keys;
  for (const PasskeyTrial& t : *trials) keys.insert(t.passkey);
  EXPECT_EQ(keys.size(), 100u);
  EXPECT_EQ(trials->front().passkey, FormatPasskey(DrawPasskeys(1, 3, 4096)->front()));

  PasskeyRunSpec custom = SeedSpec();
  custom.protocol = PasskeyProtocol::kCustom;
  custom.position = *ParsePasskeyPosition("0.25");
  const std::vector<PasskeyTrial> custom_trials = *PlanLengthTrials(custom, 4096, 7, 300);
  for (const PasskeyTrial& t : custom_trials) EXPECT_EQ(t.position.name, "0.25");
  EXPECT_EQ(PasskeyRunPositions(SeedSpec()).size(), 3u);
  EXPECT_EQ(PasskeyRunPositions(custom).size(), 1u);
}

TEST(PasskeyProtocolTest, ParsesProtocolsAndLengths) {
  EXPECT_EQ(*ParsePasskeyProtocol("seed"), PasskeyProtocol::kSeed);
  EXPECT_EQ(*ParsePasskeyProtocol("custom"), PasskeyProtocol::kCustom);
  EXPECT_FALSE(ParsePasskeyProtocol("ruler").ok());
  EXPECT_EQ(*ParsePasskeyLengths("512, 1024,512"), (std::vector<int64_t>{512, 1024}));
  EXPECT_FALSE(ParsePasskeyLengths("512,x").ok());
  EXPECT_FALSE(ParsePasskeyLengths("0").ok());
  EXPECT_FALSE(ParsePasskeyLengths("").ok());
}

// Every trial of a length has the same filler, word for word: at one
// position the prompts differ only in the passkey's 10 digits, and across
// positions only in where the passkey sentence sits.
TEST(PasskeyProtocolTest, ALengthsTrialsShareOneFiller) {
  const int64_t length = 2048;
  absl::StatusOr<PasskeyPrompt> sized =
      SizeLengthFiller(length, PasskeyRunPositions(SeedSpec()), "00000", CountBytes);
  ASSERT_TRUE(sized.ok()) << sized.status();
  absl::StatusOr<std::vector<PasskeyTrial>> trials = PlanLengthTrials(SeedSpec(), length, 30, sized->filler_words);
  ASSERT_TRUE(trials.ok());
  std::map<std::string, std::string> masked_by_position;
  std::set<std::string> fillers;
  for (const PasskeyTrial& t : *trials) {
    ASSERT_EQ(t.prompt.filler_words, sized->filler_words);
    EXPECT_LE(t.prompt.text.size(), static_cast<size_t>(length)) << "fits at every position";
    const std::string masked = absl::StrReplaceAll(t.prompt.text, {{t.passkey, "#####"}});
    EXPECT_EQ(t.prompt.text.size() - masked.size(), 0u);
    size_t differing = 0;
    for (size_t i = 0; i < masked.size(); ++i) differing += masked[i] != t.prompt.text[i];
    EXPECT_LE(differing, 10u);
    auto [it, fresh] = masked_by_position.emplace(t.position.name, masked);
    if (!fresh) {
      EXPECT_EQ(it->second, masked) << "trial " << t.index << " at " << t.position.name;
    }
    // Without the passkey sentence, the same filler words in the same order.
    std::string without = t.prompt.text;
    without.erase(t.prompt.passkey_offset, without.find('\n', t.prompt.passkey_offset) - t.prompt.passkey_offset);
    fillers.insert(absl::StrJoin(absl::StrSplit(without, absl::ByAnyChar(" \n"), absl::SkipEmpty()), " "));
  }
  EXPECT_EQ(masked_by_position.size(), 3u);
  EXPECT_EQ(fillers.size(), 1u);
}

TEST(PasskeyProtocolTest, SizedFillerFitsEveryPosition) {
  for (int64_t length : {700, 4096}) {
    for (const TokenCounter& counter : {TokenCounter(CountBytes), TokenCounter(CountWords)}) {
      int calls = 0;
      absl::StatusOr<PasskeyPrompt> p = SizeLengthFiller(length, PasskeyRunPositions(SeedSpec()), "12345", counter,
                                                         &calls);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_GT(calls, 3);
      for (const PasskeyPosition& pos : PasskeyRunPositions(SeedSpec())) {
        EXPECT_LE(*counter(BuildPasskeyPrompt(length, p->filler_words, pos.depth, "12345").text), length) << pos.name;
      }
    }
  }
  EXPECT_EQ(SizeLengthFiller(50, PasskeyRunPositions(SeedSpec()), "12345", CountBytes).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PasskeyProtocolTest, LengthsAboveMaxContextAreRefusedWithTheNumbers) {
  EXPECT_TRUE(CheckLengthsFitContext({4096, 16368}, 16, 16384).ok());
  EXPECT_TRUE(CheckLengthsFitContext({131072}, 16, 0).ok()) << "0: the router does not say";
  absl::Status s = CheckLengthsFitContext({4096, 16384, 32768}, 16, 16384);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "context length 16384 plus --max-new-tokens 16 is 16400")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_context 16384")) << s;
}

TEST(PasskeyProtocolTest, CountsByPositionAndTheVerdict) {
  std::vector<PasskeyTrial> trials = *PlanLengthTrials(SeedSpec(), kSeedVerdictLength, 100, 10);
  for (PasskeyTrial& t : trials) {
    t.done = true;
    t.correct = t.index >= 3;  // trials 0 (start), 1 (middle), 2 (end) wrong
  }
  std::vector<PasskeyLengthCells> cells =
      CountByPosition(trials, {kSeedVerdictLength}, PasskeyRunPositions(SeedSpec()));
  ASSERT_EQ(cells.size(), 1u);
  ASSERT_EQ(cells[0].positions.size(), 3u);
  EXPECT_EQ(cells[0].positions[0].trials, 34);
  EXPECT_EQ(cells[0].positions[0].correct, 33);
  EXPECT_EQ(cells[0].all.trials, 100);
  EXPECT_EQ(cells[0].all.correct, 97);
  EXPECT_EQ(FormatPasskeyCell(cells[0].all), "97/100 = 97.0% (91.5-99.0%)");
  SeedVerdict pass = JudgeSeedProtocol(cells, 0.85);
  EXPECT_EQ(pass.result, SeedVerdictResult::kPass);
  EXPECT_EQ(pass.line, "VERDICT: 131072 tokens: 97/100 = 97.0% (Wilson 91.5-99.0%): >= 85%: PASS");
  SeedVerdict fail = JudgeSeedProtocol(cells, 0.98);
  EXPECT_EQ(fail.result, SeedVerdictResult::kFail);
  EXPECT_TRUE(absl::EndsWith(fail.line, ": < 98%: FAIL")) << fail.line;
  SeedVerdict not_run = JudgeSeedProtocol(CountByPosition(trials, {512, 1024}, PasskeyRunPositions(SeedSpec())), 0.85);
  EXPECT_EQ(not_run.result, SeedVerdictResult::kNotRun);
  EXPECT_EQ(not_run.line, "VERDICT: 131072 tokens: NOT RUN (not among the context lengths 512,1024)");
}

TEST(PasskeyProtocolTest, ProgressLineHasDoneTotalResumedAndEta) {
  const std::string line = PasskeyProgressLine(3, 10, 5, 3000, 40000, 30);
  EXPECT_TRUE(absl::StartsWith(line, "pdserve-passkey: 3/10 trials (+5 resumed), 0.10 trials/s")) << line;
  EXPECT_TRUE(absl::EndsWith(line, "elapsed 30s, ETA 6m10s")) << line;  // 30 s * 37000 / 3000
  EXPECT_TRUE(absl::EndsWith(PasskeyProgressLine(0, 10, 0, 0, 40000, 1), "ETA ?"));
}

PasskeyTrial AnsweredTrial() {
  PasskeyTrial t = (*PlanLengthTrials(SeedSpec(), 512, 3, 20))[2];
  t.done = true;
  t.prompt_tokens = 500;
  t.usage_prompt_tokens = 500;
  t.answer = " " + t.passkey + ". \xc3\xa9";
  t.answer_ids = {32, 49, 50};
  t.extracted = t.passkey;
  t.correct = true;
  t.ttft_ms = 12.5;
  t.latency_ms = 40.25;
  t.tokens = 3;
  t.finish_reason = "length";
  return t;
}

TEST(PasskeyTrialsTest, TrialJsonRoundTrips) {
  const PasskeyTrial t = AnsweredTrial();
  const nlohmann::json j = nlohmann::json::parse(PasskeyTrialJson(t).dump());
  absl::StatusOr<PasskeyTrial> back = ParsePasskeyTrialJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PasskeyTrialJson(*back), PasskeyTrialJson(t));
  EXPECT_TRUE(back->done && !back->failed);
  EXPECT_EQ(back->position.name, "end");

  PasskeyTrial failed = (*PlanLengthTrials(SeedSpec(), 512, 1, 20))[0];
  failed.done = failed.failed = true;
  failed.error = "UNAVAILABLE: gone";
  absl::StatusOr<PasskeyTrial> f = ParsePasskeyTrialJson(nlohmann::json::parse(PasskeyTrialJson(failed).dump()));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->failed);
  EXPECT_EQ(f->prompt_tokens, -1);
  EXPECT_FALSE(f->ttft_ms.has_value());

  nlohmann::json broken = j;
  broken["correct"] = "yes";
  EXPECT_TRUE(absl::StrContains(ParsePasskeyTrialJson(broken).status().message(), "\"correct\"")) << "names it";
  broken.erase("correct");
  EXPECT_FALSE(ParsePasskeyTrialJson(broken).ok());
}

TEST(PasskeyTrialsTest, HeaderMustMatchTheRun) {
  const PasskeyRunSpec spec = SeedSpec();
  const nlohmann::json header = nlohmann::json::parse(PasskeyTrialsHeader(spec));
  EXPECT_TRUE(CheckPasskeyTrialsHeader(header, spec).ok());
  PasskeyRunSpec other = spec;
  other.seed = 4;
  absl::Status s = CheckPasskeyTrialsHeader(header, other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "seed 3, this run has 4 (--seed)")) << s;
  other = spec;
  other.lengths = {512, 2048};
  EXPECT_TRUE(absl::StrContains(CheckPasskeyTrialsHeader(header, other).message(), "[512,1024]"));
  other = spec;
  other.max_new_tokens = 8;
  EXPECT_TRUE(absl::StrContains(CheckPasskeyTrialsHeader(header, other).message(), "--max-new-tokens"));
  other = spec;
  other.protocol = PasskeyProtocol::kCustom;
  other.position = *ParsePasskeyPosition("middle");
  EXPECT_TRUE(absl::StrContains(CheckPasskeyTrialsHeader(header, other).message(), "--protocol"));
  EXPECT_EQ(CheckPasskeyTrialsHeader(nlohmann::json::parse(PasskeyTrialJson(AnsweredTrial()).dump()), spec).code(),
            absl::StatusCode::kInvalidArgument)
      << "a trial line is no header";
}

TEST(PasskeyTrialsTest, ParsesTheJsonlAndDropsAPartialLastLine) {
  const PasskeyRunSpec spec = SeedSpec();
  const std::string line = PasskeyTrialJson(AnsweredTrial()).dump();
  const std::string complete = PasskeyTrialsHeader(spec) + "\n" + line + "\n";
  absl::StatusOr<PasskeyTrialsFile> f = ParsePasskeyTrialsJsonl(complete + line.substr(0, 40), spec);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->records.size(), 1u);
  EXPECT_EQ(f->complete_bytes, complete.size());
  EXPECT_TRUE(ParsePasskeyTrialsJsonl("", spec)->records.empty());
  absl::Status bad = ParsePasskeyTrialsJsonl(complete + "{oops\n", spec).status();
  EXPECT_TRUE(absl::StartsWith(bad.message(), "line 3")) << bad;
  PasskeyRunSpec other = spec;
  other.seed = 9;
  EXPECT_EQ(ParsePasskeyTrialsJsonl(complete, other).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PasskeyTrialsTest, ResumeTakesDoneTrialsAndRerunsFailedOnes) {
  std::vector<PasskeyTrial> planned = *PlanLengthTrials(SeedSpec(), 512, 6, 20);
  std::vector<PasskeyTrial> records;
  for (int i : {0, 1, 2}) {
    PasskeyTrial r = planned[i];
    r.done = true;
    r.correct = true;
    r.answer = r.passkey;
    records.push_back(r);
  }
  records[1].failed = true;  // run again
  PasskeyTrial later = planned[0];  // the last record of a trial wins
  later.done = true;
  later.answer = "later";
  records.push_back(later);
  PasskeyTrial outside = planned[5];
  outside.index = 40;
  records.push_back(outside);
  absl::StatusOr<PasskeyResumeCount> n = ApplyResumedTrials(records, &planned);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->resumed, 2);
  EXPECT_EQ(n->failed_again, 1);
  EXPECT_EQ(n->outside, 1);
  EXPECT_TRUE(planned[0].done && planned[0].resumed);
  EXPECT_EQ(planned[0].answer, "later");
  EXPECT_FALSE(planned[1].done);
  EXPECT_TRUE(planned[2].done && planned[2].correct);
  EXPECT_FALSE(planned[3].done);

  std::vector<PasskeyTrial> fresh = *PlanLengthTrials(SeedSpec(), 512, 6, 20);
  records = {fresh[4]};
  records[0].passkey = "99999";
  absl::Status s = ApplyResumedTrials(records, &fresh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "trial 4 at 512 tokens has passkey 99999")) << s;
  records = *PlanLengthTrials(SeedSpec(), 512, 6, 21);  // the same passkeys with another filler size
  EXPECT_TRUE(absl::StrContains(ApplyResumedTrials(records, &fresh).status().message(), "another prompt"));
}

TEST(PasskeyTrialsTest, WriterAppendsAndResumeReadsItBack) {
  const std::string path = testing::TempDir() + "/passkey_trials_writer_test.jsonl";
  std::remove(path.c_str());
  const PasskeyRunSpec spec = SeedSpec();
  EXPECT_TRUE(CheckNewPasskeyTrialsFile(path).ok());
  EXPECT_TRUE(ReadPasskeyTrialsFile(path, spec)->records.empty()) << "missing: nothing to resume";
  {
    absl::StatusOr<std::unique_ptr<PasskeyTrialsWriter>> w = PasskeyTrialsWriter::Open(path, spec, 0);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Append(AnsweredTrial()).ok());
  }
  EXPECT_EQ(CheckNewPasskeyTrialsFile(path).code(), absl::StatusCode::kFailedPrecondition);
  std::ofstream(path, std::ios::app) << "{\"context_length\": 5";  // a killed writer's partial line
  absl::StatusOr<PasskeyTrialsFile> f = ReadPasskeyTrialsFile(path, spec);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->records.size(), 1u);
  {
    absl::StatusOr<std::unique_ptr<PasskeyTrialsWriter>> w = PasskeyTrialsWriter::Open(path, spec, f->complete_bytes);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Append(AnsweredTrial()).ok());
  }
  f = ReadPasskeyTrialsFile(path, spec);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->records.size(), 2u) << "the partial line was cut, the new one appended";
  PasskeyRunSpec other = spec;
  other.max_new_tokens = 4;
  absl::Status s = ReadPasskeyTrialsFile(path, other).status();
  EXPECT_TRUE(absl::StartsWith(s.message(), path)) << s;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pdserve
