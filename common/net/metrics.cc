#include "common/net/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/http_server.h"
#include "common/util/log.h"

namespace pdserve {
namespace {

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrFormat("%.9g", v);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string LabelText(const MetricLabels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=\"", Escape(v), "\""));
  if (!extra_key.empty()) parts.push_back(absl::StrCat(extra_key, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&out, i ? "," : "", parts[i]);
  return out + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t run = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(run += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
          1,     2.5,    5,     7.5,  10,    20,   40,    80,  160, 300};
}

MetricLabels ModelLabels(const std::string& model_name) { return {{"model", model_name}}; }

MetricsRegistry::Family& MetricsRegistry::GetFamily(const std::string& name, const std::string& help, Kind kind) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  }
  return it->second;
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Kind::kCounter).counters[labels];
  if (slot == nullptr) slot = std::make_unique<Counter>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         const std::vector<double>& bounds, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Kind::kHistogram).histograms[labels];
  if (slot == nullptr) slot = std::make_unique<Histogram>(bounds);
  return slot.get();
}

void MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help,
                                       std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  GetFamily(name, help, Kind::kGauge).callback = std::move(read);
}

void MetricsRegistry::SetConstantLabels(MetricLabels labels) {
  std::lock_guard<std::mutex> lock(mu_);
  constant_labels_ = std::move(labels);
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A series' labels over the constant ones (map::insert keeps the first).
  auto with_constant = [this](MetricLabels own) {
    own.insert(constant_labels_.begin(), constant_labels_.end());
    return own;
  };
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", type, "\n");
    for (const auto& [own, c] : f.counters) {
      absl::StrAppend(&out, name, LabelText(with_constant(own)), " ", FormatValue(c->value()), "\n");
    }
    if (f.callback) absl::StrAppend(&out, name, LabelText(constant_labels_), " ", FormatValue(f.callback()), "\n");
    for (const auto& [own, h] : f.histograms) {
      const MetricLabels labels = with_constant(own);
      const Histogram::Snapshot s = h->Read();
      for (size_t i = 0; i <= s.bounds.size(); ++i) {
        const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, "le", le), " ", s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", LabelText(labels), " ", s.count, "\n");
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host, int port,
                                                                             const MetricsRegistry* registry) {
  if (host.empty()) return absl::InvalidArgumentError("metrics host is empty: name the address to bind");
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, " is out of range"));
  }
  HttpServerOptions o;
  o.name = "metrics";
  o.host = host;
  o.port = port;
  o.max_connections = kMaxConnections;
  o.header_timeout = kHeaderTimeout;
  o.body_timeout = kHeaderTimeout;
  o.idle_timeout = kIdleTimeout;
  o.write_timeout = kIoTimeout;
  o.max_body_bytes = 64 << 10;  // GET only: no request bodies
  o.worker_threads = kWorkerThreads;
  auto handler = [registry](const HttpRequest& req, HttpResponseWriter& w) {
    constexpr char kText[] = "text/plain; charset=utf-8";
    if (req.method != "GET" && req.method != "HEAD") {
      w.Send(405, kText, "method not allowed: try GET /metrics\n");
    } else if (req.path == "/metrics") {
      w.Send(200, "text/plain; version=0.0.4; charset=utf-8", registry->Render());
    } else if (req.path == "/") {
      w.Send(200, kText, "pdserve: metrics at /metrics\n");
    } else {
      w.Send(404, kText, "not found: try GET /metrics\n");
    }
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(std::move(o), std::move(handler));
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("cannot serve metrics on ", host, ":", port, ": ", server.status().message()));
  }
  const int bound = (*server)->port();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(*server), host, bound));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<HttpServer> server, std::string host, int port)
    : server_(std::move(server)), host_(std::move(host)), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() = default;

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetrics(const std::string& host, int port,
                                                                const MetricsRegistry* registry,
                                                                const std::string& program) {
  if (port < 0) return std::unique_ptr<MetricsHttpServer>();
  auto server = MetricsHttpServer::Start(host, port, registry);
  if (server.ok()) {
    // "metrics on port N" is parsed by tests/e2e/serving_e2e_test.cc.
    log::Info(absl::StrCat("metrics on port ", (*server)->port(), " (", host, ":", (*server)->port(), ")"),
              {{"metrics_port", (*server)->port()}}, log::TextPrefix::Named(program));
  }
  return server;
}

}  // namespace pdserve
