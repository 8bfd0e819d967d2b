// The registry's text rendering (issue 15): constant labels (the model) on
// every series, callback gauges, and latency buckets that hold the usual SLO
// bounds so that an SLO ratio reads a bucket exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/net/metrics.h"

namespace pdserve {
namespace {

bool Has(const std::string& body, const std::string& line) { return body.find(line + "\n") != std::string::npos; }

TEST(MetricsRegistryTest, ConstantLabelsAreOnEverySeries) {
  MetricsRegistry r;
  r.SetConstantLabels(ModelLabels("passkey-4l"));
  r.GetCounter("pdserve_t_total", "c")->Increment(2);
  r.GetCounter("pdserve_t_by_code_total", "c", {{"code", "OK"}})->Increment();
  r.AddCallbackGauge("pdserve_t_ratio", "g", [] { return 0.25; });
  r.GetHistogram("pdserve_t_seconds", "h", {0.1, 1})->Observe(0.5);
  const std::string body = r.Render();
  EXPECT_TRUE(Has(body, "pdserve_t_total{model=\"passkey-4l\"} 2")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_by_code_total{code=\"OK\",model=\"passkey-4l\"} 1")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_ratio{model=\"passkey-4l\"} 0.25")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{model=\"passkey-4l\",le=\"0.1\"} 0")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{model=\"passkey-4l\",le=\"1\"} 1")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{model=\"passkey-4l\",le=\"+Inf\"} 1")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_sum{model=\"passkey-4l\"} 0.5")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_count{model=\"passkey-4l\"} 1")) << body;
  // Every sample line carries the label.
  size_t samples = 0, start = 0;
  while (start < body.size()) {
    const size_t end = body.find('\n', start);
    const std::string line = body.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_NE(line.find("model=\"passkey-4l\""), std::string::npos) << line;
  }
  EXPECT_EQ(samples, 2u + 1 + 3 + 2);
}

TEST(MetricsRegistryTest, WithoutConstantLabelsSeriesAreBare) {
  MetricsRegistry r;
  r.GetCounter("pdserve_t_total", "c")->Increment();
  r.AddCallbackGauge("pdserve_t_gauge", "g", [] { return 3.0; });
  const std::string body = r.Render();
  EXPECT_TRUE(Has(body, "pdserve_t_total 1")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_gauge 3")) << body;
  EXPECT_TRUE(Has(body, "# TYPE pdserve_t_gauge gauge")) << body;
}

TEST(MetricsRegistryTest, ASeriesLabelWinsOverAConstantOne) {
  MetricsRegistry r;
  r.SetConstantLabels({{"model", "a"}, {"zone", "z1"}});
  r.GetCounter("pdserve_t_total", "c", {{"model", "b"}})->Increment();
  const std::string body = r.Render();
  EXPECT_TRUE(Has(body, "pdserve_t_total{model=\"b\",zone=\"z1\"} 1")) << body;
  EXPECT_EQ(body.find("model=\"a\""), std::string::npos) << body;
}

TEST(MetricsRegistryTest, CallbackGaugesAreReadAtEachRender) {
  MetricsRegistry r;
  double v = 0;
  r.AddCallbackGauge("pdserve_t_ratio", "g", [&v] { return v; });
  EXPECT_TRUE(Has(r.Render(), "pdserve_t_ratio 0"));
  v = 0.875;
  EXPECT_TRUE(Has(r.Render(), "pdserve_t_ratio 0.875"));
}

TEST(MetricsRegistryTest, LatencyBucketsHoldTheSloBounds) {
  const std::vector<double> b = LatencyBuckets();
  ASSERT_TRUE(std::is_sorted(b.begin(), b.end()));
  EXPECT_EQ(std::adjacent_find(b.begin(), b.end()), b.end()) << "a bound twice";
  for (double slo : {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0}) {
    EXPECT_NE(std::find(b.begin(), b.end(), slo), b.end()) << slo << " s is not a bucket bound";
  }
  EXPECT_LE(b.front(), 0.001);
  EXPECT_GE(b.back(), 60.0);  // long CPU generations still land in a finite bucket

  // A 70 ms observation counts under 75 ms, not under 50 ms, and renders
  // the bound as written.
  MetricsRegistry r;
  r.GetHistogram("pdserve_t_seconds", "h", b)->Observe(0.07);
  const std::string body = r.Render();
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{le=\"0.05\"} 0")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{le=\"0.075\"} 1")) << body;
  EXPECT_TRUE(Has(body, "pdserve_t_seconds_bucket{le=\"2.5\"} 1")) << body;
}

}  // namespace
}  // namespace pdserve
