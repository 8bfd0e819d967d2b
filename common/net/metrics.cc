#include "common/net/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = GetFamily(name, help, Kind::kGauge).gauges[labels];
  if (slot == nullptr) slot = std::make_unique<Gauge>();
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

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, c] : f.counters) absl::StrAppend(&out, name, LabelText(labels), " ", FormatValue(c->value()), "\n");
    for (const auto& [labels, g] : f.gauges) absl::StrAppend(&out, name, LabelText(labels), " ", FormatValue(g->value()), "\n");
    if (f.callback) absl::StrAppend(&out, name, " ", FormatValue(f.callback()), "\n");
    for (const auto& [labels, h] : f.histograms) {
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
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("metrics socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("metrics host '", host, "' is not an IPv4 address"));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", host, ":", port, ": ", why));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(fd, ntohs(addr.sin_port), registry));
}

MetricsHttpServer::MetricsHttpServer(int fd, int port, const MetricsRegistry* registry)
    : fd_(fd), port_(port), registry_(registry) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

void MetricsHttpServer::Loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;  // wake up to notice stop_
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Serve(client);
    close(client);
  }
}

void MetricsHttpServer::Serve(int client) {
  // Read the request head (bounded; a scraper sends a few hundred bytes).
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    pollfd p{client, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (req.rfind("GET /metrics", 0) == 0) {
    body = registry_->Render();
  } else if (req.rfind("GET / ", 0) == 0) {
    type = "text/plain; charset=utf-8";
    body = "pdserve: metrics at /metrics\n";
  } else {
    status = "404 Not Found";
    type = "text/plain; charset=utf-8";
    body = "not found: try GET /metrics\n";
  }
  const std::string head = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                                        "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  const std::string all = head + body;
  size_t off = 0;
  while (off < all.size()) {
    const ssize_t n = send(client, all.data() + off, all.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetrics(int port, const MetricsRegistry* registry,
                                                                const char* program) {
  if (port < 0) return std::unique_ptr<MetricsHttpServer>();
  auto server = MetricsHttpServer::Start("0.0.0.0", port, registry);
  if (server.ok()) std::fprintf(stderr, "%s: metrics on port %d\n", program, (*server)->port());
  return server;
}

}  // namespace pdserve
