#include "common/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace pdserve {
namespace {

TEST(SamplerTest, SplitMix64KnownValues) {
  // Reference values of the standard splitmix64 finaliser.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(1), 0x910A2DEC89025CC1ull);
}

TEST(SamplerTest, CounterUniformIsPureAndInRange) {
  for (uint64_t n = 0; n < 1000; ++n) {
    const double u = CounterUniform(42, n);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_EQ(u, CounterUniform(42, n));
  }
  EXPECT_NE(CounterUniform(1, 0), CounterUniform(2, 0));
  EXPECT_EQ(CounterUniform(7, 3), static_cast<double>(SplitMix64(7 ^ SplitMix64(3)) >> 11) / 9007199254740992.0);
}

TEST(SamplerTest, GreedyTiesGoToTheLowerId) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  SamplingParams p;  // temperature 0
  EXPECT_EQ(SampleToken(l.data(), 4, p, 0), 1);
  p.temperature = -1.0f;
  EXPECT_EQ(SampleToken(l.data(), 4, p, 5), 1);
}

// The set of ids drawn over many seeds.
std::set<int64_t> Support(const std::vector<float>& logits, SamplingParams p) {
  std::set<int64_t> seen;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    p.seed = seed;
    seen.insert(SampleToken(logits.data(), static_cast<int64_t>(logits.size()), p, 0));
  }
  return seen;
}

std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(SamplerTest, TopPKeepsTheShortestPrefixReachingTheMass) {
  const auto l = LogitsOf({0.1, 0.4, 0.1, 0.3, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.35f;
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{1}));
  p.top_p = 0.65f;
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{1, 3}));
  p.top_p = 0.75f;  // 0.4 + 0.3 + 0.1: the tie at 0.1 goes to id 0
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{0, 1, 3}));
  p.top_p = 1.0f;
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{0, 1, 2, 3, 4}));
  p.top_p = 0.0f;  // 0 means keep all
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{0, 1, 2, 3, 4}));
}

TEST(SamplerTest, TopKKeepsTheMostLikelyWithTiesToLowerIds) {
  const auto l = LogitsOf({0.1, 0.4, 0.1, 0.3, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{0, 1, 3}));
  p.top_k = 1;
  EXPECT_EQ(Support(l, p), (std::set<int64_t>{1}));
}

TEST(SamplerTest, InverseCdfFollowsTheSortedOrder) {
  // Sorted list: id 1 (0.4), id 3 (0.3), id 0, id 2, id 4 (0.1 each).
  const auto l = LogitsOf({0.1, 0.4, 0.1, 0.3, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  const std::vector<double> edges = {0.4, 0.7, 0.8, 0.9, 1.0};
  const std::vector<int64_t> ids = {1, 3, 0, 2, 4};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    const double u = CounterUniform(seed, 0);
    size_t bucket = 0;
    while (bucket + 1 < edges.size() && u >= edges[bucket] - 1e-6) ++bucket;
    if (std::abs(u - edges[bucket > 0 ? bucket - 1 : 0]) < 1e-6) continue;  // too close to call
    EXPECT_EQ(SampleToken(l.data(), 5, p, 0), ids[bucket]) << "u=" << u;
  }
}

TEST(SamplerTest, FrequenciesFollowTheDistributionOnALargeVocab) {
  // 50k ids, two hold most of the mass: exercises the growing sorted prefix.
  std::vector<float> l(50000, 0.0f);
  l[123] = 12.0f;
  l[45678] = 11.0f;
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<int64_t, int> count;
  for (uint64_t n = 0; n < 1000; ++n) ++count[SampleToken(l.data(), 50000, p, n)];
  const double z = std::exp(12.0) + std::exp(11.0) + 49998.0;
  EXPECT_NEAR(count[123] / 1000.0, std::exp(12.0) / z, 0.04);
  EXPECT_NEAR(count[45678] / 1000.0, std::exp(11.0) / z, 0.04);
  p.top_p = 0.5f;  // only id 123 reaches 0.5
  EXPECT_EQ(SampleToken(l.data(), 50000, p, 3), 123);
}

// docs/model.md's procedure written plainly, with the whole vocabulary
// sorted up front: what SampleToken's lazily sorted buckets must reproduce.
int64_t FullSortSample(const std::vector<float>& logits, const SamplingParams& sp, uint64_t n) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const double t = sp.temperature;
  double max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, static_cast<double>(l) / t);
  std::vector<double> p(logits.size());
  double z = 0.0;
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(static_cast<double>(logits[i]) / t - max_l);
  for (double& x : p) x /= z;
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  const int64_t k = (sp.top_k > 0 && sp.top_k < vocab) ? sp.top_k : vocab;
  double kept = 1.0;
  if (k < vocab) {
    kept = 0.0;
    for (int64_t i = 0; i < k; ++i) kept += p[order[i]];
  }
  int64_t m = k;
  double mass = 1.0;
  if (sp.top_p > 0.0f && sp.top_p < 1.0f) {
    double cum = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      cum += p[order[i]] / kept;
      if (cum >= sp.top_p) {
        m = i + 1;
        break;
      }
    }
    mass = cum;
  }
  const double u = CounterUniform(sp.seed, n);
  double cum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    cum += p[order[i]] / kept / mass;
    if (cum > u) return order[i];
  }
  return order[m - 1];
}

TEST(SamplerTest, DrawsWhatAFullSortDraws) {
  // Flat, peaked and tied logits (rounded to a grid, so many ids share a
  // probability and ties cross the sort's buckets), over every truncation.
  std::mt19937 rng(5);
  int checked = 0;
  for (const int64_t vocab : {7, 1000, 20000}) {
    for (const float sigma : {0.3f, 2.0f, 12.0f}) {
      for (const bool grid : {false, true}) {
        std::normal_distribution<float> dist(0.0f, sigma);
        std::vector<float> l(static_cast<size_t>(vocab));
        for (float& x : l) x = grid ? std::round(dist(rng) * 4.0f) / 4.0f : dist(rng);
        for (const float temperature : {0.25f, 1.0f, 1.7f}) {
          for (const float top_p : {1.0f, 0.9f, 0.3f}) {
            for (const int64_t top_k : {int64_t{0}, int64_t{1}, int64_t{40}, vocab / 2}) {
              SamplingParams sp;
              sp.temperature = temperature;
              sp.top_p = top_p;
              sp.top_k = top_k;
              sp.seed = static_cast<uint64_t>(checked);
              for (uint64_t n = 0; n < 4; ++n, ++checked) {
                ASSERT_EQ(SampleToken(l.data(), vocab, sp, n), FullSortSample(l, sp, n))
                    << "vocab " << vocab << " sigma " << sigma << " grid " << grid << " T " << temperature
                    << " top_p " << top_p << " top_k " << top_k << " n " << n;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 3 * 2 * 3 * 3 * 4 * 4);
}

TEST(SamplerTest, NonFiniteLogitsFallBackToTheArgmax) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  std::vector<float> l = {0.5f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_EQ(SampleToken(l.data(), 4, sp, 0), 1);
  l[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(SampleToken(l.data(), 4, sp, 0), 2);
  const std::vector<float> none(3, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(SampleToken(none.data(), 3, sp, 0), 0);
}

}  // namespace
}  // namespace pdserve
