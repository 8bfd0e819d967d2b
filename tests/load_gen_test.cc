#include "bench/load_gen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace pdserve::bench {
namespace {

// --- The random stream --------------------------------------------------

TEST(SplitMix64Test, MatchesTheReferenceSequence) {
  // The published SplitMix64 from state 0 (also what Python gives for the
  // same three lines of arithmetic).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
}

TEST(SplitMix64Test, OpenUnitIsStrictlyInsideAndCentred) {
  SplitMix64 rng(42);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.NextOpenUnit();
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // std error 0.0009
}

TEST(SplitMix64Test, RangeIsInclusiveAndUniform) {
  SplitMix64 rng(7);
  std::vector<int> counts(6, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    const int64_t v = rng.NextInRange(10, 15);
    ASSERT_GE(v, 10);
    ASSERT_LE(v, 15);
    ++counts[static_cast<size_t>(v - 10)];
  }
  // Each value expects 10000 (std ~91): every one within 5%.
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  EXPECT_EQ(rng.NextInRange(5, 5), 5);
  EXPECT_EQ(rng.NextInRange(-3, -3), -3);
}

TEST(SplitMix64Test, StreamsOfOneSeedDiffer) {
  EXPECT_NE(StreamSeed(0, 1), StreamSeed(0, 2));
  EXPECT_NE(StreamSeed(0, 1), StreamSeed(1, 1));
  EXPECT_EQ(StreamSeed(9, 3), StreamSeed(9, 3));
}

// --- Poisson arrivals ---------------------------------------------------

TEST(PoissonArrivalsTest, MeanGapIsOneOverRate) {
  const double rate = 20;
  auto a = PoissonArrivals(20001, rate, 123);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 20001u);
  EXPECT_EQ((*a)[0], 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < a->size(); ++i) {
    ASSERT_GE((*a)[i], (*a)[i - 1]);
    gaps.push_back((*a)[i] - (*a)[i - 1]);
  }
  double mean = 0;
  for (double g : gaps) mean += g;
  mean /= static_cast<double>(gaps.size());
  // Exponential gaps: mean 1/rate = 50 ms (std error 0.35 ms) ...
  EXPECT_NEAR(mean, 1 / rate, 0.05 / rate);
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= static_cast<double>(gaps.size());
  // ... standard deviation equal to the mean (a fixed gap would have 0) ...
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.05);
  // ... and median ln 2 / rate: half the gaps below it.
  const auto below = std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g < std::log(2.0) / rate; });
  EXPECT_NEAR(static_cast<double>(below) / static_cast<double>(gaps.size()), 0.5, 0.02);
}

TEST(PoissonArrivalsTest, SeededAndDeterministic) {
  auto a = PoissonArrivals(50, 4, 1);
  auto b = PoissonArrivals(50, 4, 1);
  auto c = PoissonArrivals(50, 4, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  // The same seed at twice the rate: the same gaps, halved.
  auto d = PoissonArrivals(50, 8, 1);
  ASSERT_TRUE(d.ok());
  for (size_t i = 0; i < 50; ++i) EXPECT_NEAR((*d)[i], (*a)[i] / 2, 1e-12 * (1 + (*a)[i]));
}

TEST(PoissonArrivalsTest, InfiniteRateSendsEverythingAtOnce) {
  auto a = PoissonArrivals(5, std::numeric_limits<double>::infinity(), 3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, std::vector<double>(5, 0.0));
  auto empty = PoissonArrivals(0, 1, 3);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(PoissonArrivalsTest, RejectsBadRatesAndCounts) {
  EXPECT_FALSE(PoissonArrivals(5, 0, 1).ok());
  EXPECT_FALSE(PoissonArrivals(5, -2, 1).ok());
  EXPECT_FALSE(PoissonArrivals(5, std::nan(""), 1).ok());
  EXPECT_FALSE(PoissonArrivals(-1, 1, 1).ok());
}

// --- Lengths -------------------------------------------------------------

TEST(LengthRangeTest, ParsesFixedAndRanges) {
  auto fixed = ParseLengthRange("32");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->lo, 32);
  EXPECT_EQ(fixed->hi, 32);
  auto range = ParseLengthRange("16:64");
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->lo, 16);
  EXPECT_EQ(range->hi, 64);
  auto same = ParseLengthRange("8:8");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->lo, same->hi);
  for (const char* bad : {"", "0", "-4", "a", "5:3", "1:2:3", "0:4", ":4", "4:", "x:9"}) {
    EXPECT_FALSE(ParseLengthRange(bad).ok()) << bad;
  }
}

TEST(LengthsFileTest, ParsesPairsSkippingCommentsAndBlankLines) {
  auto pairs = ParseLengthsFile("# input output\n128 32\n\n  512\t64  \n7,9\n# end\n");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  const std::vector<RequestLengths> want = {{128, 32}, {512, 64}, {7, 9}};
  EXPECT_EQ(*pairs, want);
}

TEST(LengthsFileTest, NamesTheBadLine) {
  auto bad = ParseLengthsFile("10 20\n30\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("line 2"), std::string::npos) << bad.status();
  auto zero = ParseLengthsFile("10 20\n\n5 0\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(std::string(zero.status().message()).find("line 3"), std::string::npos) << zero.status();
  EXPECT_FALSE(ParseLengthsFile("1 2 3\n").ok());
  EXPECT_FALSE(ParseLengthsFile("# nothing\n\n").ok());
}

TEST(SampleLengthsTest, UniformWithinTheRangesAndSeeded) {
  const LengthRange in{10, 20}, out{1, 4};
  std::vector<RequestLengths> a = SampleLengths(4000, in, out, 5);
  ASSERT_EQ(a.size(), 4000u);
  std::set<int64_t> ins, outs;
  double in_sum = 0;
  for (const RequestLengths& l : a) {
    ASSERT_GE(l.input, 10);
    ASSERT_LE(l.input, 20);
    ASSERT_GE(l.output, 1);
    ASSERT_LE(l.output, 4);
    ins.insert(l.input);
    outs.insert(l.output);
    in_sum += static_cast<double>(l.input);
  }
  EXPECT_EQ(ins.size(), 11u);  // both ends reached
  EXPECT_EQ(outs.size(), 4u);
  EXPECT_NEAR(in_sum / 4000, 15.0, 0.3);  // std error 0.05
  EXPECT_EQ(SampleLengths(4000, in, out, 5), a);
  EXPECT_NE(SampleLengths(4000, in, out, 6), a);
  for (const RequestLengths& l : SampleLengths(10, {32, 32}, {16, 16}, 9)) EXPECT_EQ(l, (RequestLengths{32, 16}));
}

TEST(CycleLengthsTest, TakesThePairsInOrderAndStartsOver) {
  const std::vector<RequestLengths> pairs = {{1, 2}, {3, 4}, {5, 6}};
  const std::vector<RequestLengths> want = {{1, 2}, {3, 4}, {5, 6}, {1, 2}, {3, 4}};
  EXPECT_EQ(CycleLengths(5, pairs), want);
  EXPECT_EQ(CycleLengths(2, pairs), std::vector<RequestLengths>(pairs.begin(), pairs.begin() + 2));
}

TEST(PromptIdsTest, BelowTheVocabAndAFunctionOfSeedAndIndex) {
  std::vector<uint32_t> a = PromptIds(4096, 256, 1, 0);
  ASSERT_EQ(a.size(), 4096u);
  std::set<uint32_t> distinct(a.begin(), a.end());
  EXPECT_LT(*distinct.rbegin(), 256u);
  EXPECT_GT(distinct.size(), 250u);  // spread over the vocabulary
  EXPECT_EQ(PromptIds(4096, 256, 1, 0), a);
  EXPECT_NE(PromptIds(4096, 256, 1, 1), a);
  EXPECT_NE(PromptIds(4096, 256, 2, 0), a);
  EXPECT_EQ(PromptIds(5, 1, 3, 3), std::vector<uint32_t>(5, 0));
  EXPECT_TRUE(PromptIds(0, 256, 1, 0).empty());
}

// --- Statistics ---------------------------------------------------------

TEST(PercentileTest, MatchesNumpyLinear) {
  // Expected values from numpy.percentile (numpy 1.24, method "linear").
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile({15, 20, 35, 40, 50}, 40), 29.0);
  const std::vector<double> unsorted = {3.5, -1, 10, 7.25, 0, 2};
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 90), 8.625);
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 99), 9.8625);
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 50), 2.75);
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 33), 1.3);
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 0), -1);
  EXPECT_DOUBLE_EQ(Percentile(unsorted, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({4.5}, 99), 4.5);
}

TEST(PercentileTest, NanForNoValuesOrABadRank) {
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  EXPECT_TRUE(std::isnan(Percentile({1, 2}, -1)));
  EXPECT_TRUE(std::isnan(Percentile({1, 2}, 100.5)));
}

TEST(SummarizeTest, OneToHundred) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Summary s = Summarize(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.median, 50.5);
  EXPECT_DOUBLE_EQ(s.p90, 90.1);
  EXPECT_DOUBLE_EQ(s.p99, 99.01);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_NEAR(s.std, 28.86607004772212, 1e-12);  // numpy.std (population)
}

TEST(SummarizeTest, EmptyIsNan) {
  const Summary s = Summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_TRUE(std::isnan(s.mean) && std::isnan(s.median) && std::isnan(s.p99) && std::isnan(s.max));
}

// --- Per-request metrics and goodput -------------------------------------

RequestTiming Timing(bool ok, int64_t tokens, double ttft, double e2el, std::vector<double> itl = {}) {
  RequestTiming t;
  t.ok = ok;
  t.output_tokens = tokens;
  t.ttft_ms = ttft;
  t.e2el_ms = e2el;
  t.itl_ms = std::move(itl);
  return t;
}

TEST(TpotTest, ExcludesTheFirstToken) {
  EXPECT_DOUBLE_EQ(*TpotMs(Timing(true, 5, 100, 500)), 100.0);
  EXPECT_DOUBLE_EQ(*TpotMs(Timing(true, 2, 30, 40)), 10.0);
  EXPECT_FALSE(TpotMs(Timing(true, 1, 30, 40)).has_value());
  EXPECT_FALSE(TpotMs(Timing(false, 0, 0, 40)).has_value());
}

TEST(SloTest, ParsesAnySubsetInAnyOrder) {
  auto both = ParseSlo("ttft:500 tpot:50");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->ttft_ms, 500.0);
  EXPECT_EQ(both->tpot_ms, 50.0);
  EXPECT_FALSE(both->e2el_ms.has_value());
  auto commas = ParseSlo("tpot:2.5,TTFT:60000");
  ASSERT_TRUE(commas.ok()) << commas.status();
  EXPECT_EQ(commas->ttft_ms, 60000.0);
  EXPECT_EQ(commas->tpot_ms, 2.5);
  auto e2el = ParseSlo("e2el:1000");
  ASSERT_TRUE(e2el.ok());
  EXPECT_FALSE(e2el->ttft_ms.has_value());
  EXPECT_EQ(e2el->e2el_ms, 1000.0);
}

TEST(SloTest, RejectsBadItems) {
  for (const char* bad : {"", "ttft", "ttft:", "foo:1", "ttft:-1", "ttft:0", "ttft:abc", "ttft:1 ttft:2", "tpot:inf"}) {
    EXPECT_FALSE(ParseSlo(bad).ok()) << bad;
  }
  auto unknown = ParseSlo("ttft:5 itl:3");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("itl"), std::string::npos);
}

TEST(GoodputTest, EveryGivenBoundMustHold) {
  Slo slo;
  slo.ttft_ms = 100;
  slo.tpot_ms = 10;
  EXPECT_TRUE(MeetsSlo(Timing(true, 11, 100, 200), slo));   // both exactly at the bounds
  EXPECT_FALSE(MeetsSlo(Timing(true, 11, 101, 201), slo));  // TTFT over
  EXPECT_FALSE(MeetsSlo(Timing(true, 11, 50, 251), slo));   // TPOT 20.1 over
  EXPECT_TRUE(MeetsSlo(Timing(true, 1, 90, 5000), slo));    // one token: TPOT counts as 0
  EXPECT_FALSE(MeetsSlo(Timing(false, 11, 1, 2), slo));     // failed: never good
  Slo ttft_only;
  ttft_only.ttft_ms = 100;
  EXPECT_TRUE(MeetsSlo(Timing(true, 11, 50, 100000), ttft_only));  // TPOT not constrained
  Slo e2el;
  e2el.e2el_ms = 300;
  EXPECT_FALSE(MeetsSlo(Timing(true, 2, 1, 301), e2el));
  const std::vector<RequestTiming> all = {Timing(true, 11, 100, 200), Timing(true, 11, 101, 201),
                                          Timing(true, 1, 90, 5000), Timing(false, 11, 1, 2)};
  EXPECT_EQ(CountGood(all, slo), 2);
  EXPECT_EQ(CountGood(all, ttft_only), 2);
}

TEST(RunMetricsTest, AggregatesSuccessfulRequestsAndCountsFailuresByCode) {
  std::vector<RequestOutcome> o = {
      {Timing(true, 5, 100, 500, {100, 100, 150, 50}), 32, ""},
      {Timing(true, 3, 200, 400, {100, 100}), 16, ""},
      {Timing(true, 1, 50, 50), 8, ""},
      {Timing(false, 2, 10, 20, {10}), 64, "UNAVAILABLE"},
      {Timing(false, 0, 0, 5), 64, "UNAVAILABLE"},
      {Timing(false, 0, 0, 5), 64, "RESOURCE_EXHAUSTED"},
  };
  Slo slo;
  slo.ttft_ms = 150;
  const RunMetrics m = ComputeRunMetrics(o, 2.0, slo);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 3);
  EXPECT_EQ(m.failed_by_code.at("UNAVAILABLE"), 2);
  EXPECT_EQ(m.failed_by_code.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(m.total_input_tokens, 56);  // failed requests' prompts are not counted
  EXPECT_EQ(m.total_output_tokens, 9);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 32.5);
  ASSERT_TRUE(m.good.has_value() && m.goodput.has_value());
  EXPECT_EQ(*m.good, 2);  // TTFT 100 and 50 meet 150; 200 does not
  EXPECT_DOUBLE_EQ(*m.goodput, 1.0);
  EXPECT_EQ(m.ttft_ms.count, 3);
  EXPECT_DOUBLE_EQ(m.ttft_ms.median, 100);
  EXPECT_EQ(m.tpot_ms.count, 2);  // the one-token request has no TPOT
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, (100.0 + 100.0) / 2);
  EXPECT_EQ(m.itl_ms.count, 6);  // pooled over successful requests only
  EXPECT_DOUBLE_EQ(m.itl_ms.max, 150);
  EXPECT_DOUBLE_EQ(m.e2el_ms.max, 500);
}

TEST(RunMetricsTest, NoSloNoGoodputAndZeroDuration) {
  const RunMetrics m = ComputeRunMetrics({{Timing(true, 2, 1, 2), 4, ""}}, 0.0, Slo{});
  EXPECT_FALSE(m.good.has_value());
  EXPECT_FALSE(m.goodput.has_value());
  EXPECT_EQ(m.request_throughput, 0.0);
  const RunMetrics none = ComputeRunMetrics({}, 1.0, Slo{});
  EXPECT_EQ(none.completed, 0);
  EXPECT_TRUE(std::isnan(none.ttft_ms.mean));
}

// --- The stream timer and the SSE parser (the backends) -------------------

TEST(StreamTimerTest, FirstMessageIsTtftLaterOnesAreOneGapEach) {
  const Clock::time_point sent{};
  BackendResult out;
  StreamTimer timer(sent, &out);
  timer.OnTokens(1, sent + std::chrono::milliseconds(40));
  timer.OnTokens(3, sent + std::chrono::milliseconds(50));  // 3 tokens: one gap
  timer.OnTokens(1, sent + std::chrono::milliseconds(75));
  timer.Finish(sent + std::chrono::milliseconds(80));
  EXPECT_DOUBLE_EQ(out.timing.ttft_ms, 40);
  EXPECT_EQ(out.timing.itl_ms, (std::vector<double>{10, 25}));
  EXPECT_EQ(out.timing.output_tokens, 5);
  EXPECT_EQ(out.messages, 3);
  EXPECT_DOUBLE_EQ(out.timing.e2el_ms, 80);
}

TEST(SseParserTest, EventsEndAtABlankLineWhateverTheSplit) {
  const std::string stream = "data: {\"a\":1}\n\n: keep-alive comment\n\ndata: [DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += step) {
      for (std::string& e : p.Feed(absl::string_view(stream).substr(i, step))) got.push_back(std::move(e));
    }
    ASSERT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "[DONE]"})) << "split every " << step << " bytes";
  }
}

TEST(SseParserTest, LineEndingsDataLinesAndOtherFields) {
  SseParser p;
  // CRLF and CR line ends; two data lines join with LF; "data:" without a
  // space; event/id fields and a field merely starting with "data" ignored.
  EXPECT_EQ(p.Feed("event: x\r\ndata: one\r\ndata:two\r\nid: 7\r\ndatabase: no\r\n\r\n"),
            (std::vector<std::string>{"one\ntwo"}));
  EXPECT_EQ(p.Feed("data: three\r\r"), (std::vector<std::string>{"three"}));
  EXPECT_EQ(p.Feed("id: 1\n\n"), std::vector<std::string>{});  // no data: no event
  EXPECT_EQ(p.Feed("data\n\n"), (std::vector<std::string>{""}));
  EXPECT_EQ(p.Feed("data: unfinished\n"), std::vector<std::string>{});  // waits for the blank line
  EXPECT_EQ(p.Feed("\n"), (std::vector<std::string>{"unfinished"}));
}

}  // namespace
}  // namespace pdserve::bench
