// Prometheus metrics: counters, callback gauges and histograms in a registry that
// renders the text exposition format (version 0.0.4) with constant labels
// (the model) on every series, latency bucket bounds, and an HTTP server
// (HttpServer, common/net/http_server.h) for GET /metrics. Every series name carries its unit
// (_seconds, _bytes, _total).
//
// Updates are lock-free (atomics) except histograms, which take a short
// mutex; rendering may run concurrently with updates.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve {

class HttpServer;

using MetricLabels = std::map<std::string, std::string>;

// atomic<double>::fetch_add is C++20.
inline void AtomicAdd(std::atomic<double>& a, double by) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + by, std::memory_order_relaxed)) {
  }
}

class Counter {
 public:
  void Increment(double by = 1) { AtomicAdd(value_, by); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Cumulative counts per bound (+Inf last), the sum and the count.
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the last.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Bucket bounds for latencies in seconds, 1 ms .. 300 s, holding the usual
// SLO bounds (5, 10, 25, 50, 75, 100, 250, 500, 750 ms, 1, 2.5, 5, 10 s) so
// that histogram_quantile and SLO ratios need no interpolation there.
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  // The same (name, labels) returns the same series. Names must be valid
  // Prometheus names; `help` is printed once per name.
  Counter* GetCounter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                          const MetricLabels& labels = {});
  // A gauge read at render time (queue depths, KV bytes held elsewhere).
  void AddCallbackGauge(const std::string& name, const std::string& help, std::function<double()> read);
  // Labels rendered on every series (the servers set {"model": <config
  // name>} once at startup, ModelLabels). A series' own label of the same
  // name wins.
  void SetConstantLabels(MetricLabels labels);

  // The text exposition format, families sorted by name.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
    std::function<double()> callback;
  };
  Family& GetFamily(const std::string& name, const std::string& help, Kind kind);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  MetricLabels constant_labels_;
};

// The constant labels of a server of `model_name` (the model's config.json
// "name"): {"model": model_name}.
MetricLabels ModelLabels(const std::string& model_name);

// Serves GET /metrics (the registry's text format) and GET / (a pointer to
// it) over HTTP/1.1 on HttpServer (common/net/http_server.h); any other path
// is 404. One event-loop thread reads every request under hard header and
// idle deadlines, so slow, idle or half-sent connections hold no thread and
// never block other scrapes; complete requests are rendered on a small pool.
class MetricsHttpServer {
 public:
  // Hard deadline for a request's headers; an idle keep-alive connection is
  // closed after kIdleTimeout; a scraper that reads nothing for
  // kIoTimeout is dropped.
  static constexpr absl::Duration kHeaderTimeout = absl::Seconds(5);
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(2);
  static constexpr absl::Duration kIoTimeout = absl::Seconds(5);
  // Open connections; past it a new one gets 503 and is closed.
  static constexpr int kMaxConnections = 256;
  // Worker threads: renders at once.
  static constexpr int kWorkerThreads = 2;

  // Binds `host:port` (port 0 picks one). InvalidArgument for an empty host,
  // Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  const MetricsRegistry* registry);
  ~MetricsHttpServer();  // stops and joins
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  MetricsHttpServer(std::unique_ptr<HttpServer> server, std::string host, int port);

  std::unique_ptr<HttpServer> server_;
  const std::string host_;
  const int port_;
};

// For the servers' --metrics-port flag: nullptr when `port` < 0 (off);
// otherwise serves on host:port (port 0 picks one) and prints
// "PROGRAM: metrics on port N (host:N)". Unavailable when it cannot bind.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetrics(const std::string& host, int port,
                                                                const MetricsRegistry* registry,
                                                                const std::string& program);

}  // namespace pdserve
