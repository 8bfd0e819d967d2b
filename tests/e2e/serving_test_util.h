// Client-side helpers for the serving end-to-end tests: a blocking
// Generate that collects the stream, worker load queries, and polling.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "common/net/server.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "pdserve/v1/generate.grpc.pb.h"

namespace pdserve::testing {

struct GenerateResult {
  grpc::Status status;
  std::vector<int64_t> ids;
  std::string text;
  pdserve::v1::FinishReason finish = pdserve::v1::FINISH_REASON_UNSPECIFIED;
  pdserve::v1::Usage usage;
  int messages = 0;
};

inline pdserve::v1::GenerateRequest IdsRequest(const std::vector<int64_t>& prompt, uint32_t max_new,
                                               float temperature = 0, float top_p = 0, uint32_t top_k = 0,
                                               uint64_t seed = 0) {
  pdserve::v1::GenerateRequest r;
  for (int64_t id : prompt) r.add_token_ids(static_cast<uint32_t>(id));
  auto* s = r.mutable_sampling();
  s->set_max_new_tokens(max_new);
  s->set_temperature(temperature);
  s->set_top_p(top_p);
  s->set_top_k(top_k);
  s->set_seed(seed);
  return r;
}

// Calls Generate and reads the whole stream. `on_message` (optional) runs
// after each message with the context, so a test can cancel mid-stream.
inline GenerateResult Generate(const std::string& router, const pdserve::v1::GenerateRequest& req,
                               std::chrono::seconds deadline = std::chrono::seconds(120),
                               const std::function<void(grpc::ClientContext*, const GenerateResult&)>& on_message =
                                   nullptr) {
  auto stub = pdserve::v1::Generator::NewStub(MakeChannel(router));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  GenerateResult out;
  auto reader = stub->Generate(&ctx, req);
  pdserve::v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    ++out.messages;
    for (uint32_t id : msg.token_ids()) out.ids.push_back(id);
    out.text += msg.text();
    if (msg.finish_reason() != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
      out.finish = msg.finish_reason();
      out.usage = msg.usage();
    }
    if (on_message) on_message(&ctx, out);
  }
  out.status = reader->Finish();
  return out;
}

inline internal::v1::GetLoadResponse DecodeLoad(const std::string& address) {
  auto stub = internal::v1::DecodeWorker::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  internal::v1::GetLoadResponse r;
  stub->GetLoad(&ctx, internal::v1::GetLoadRequest(), &r);
  return r;
}

inline internal::v1::GetLoadResponse PrefillLoad(const std::string& address) {
  auto stub = internal::v1::PrefillWorker::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  internal::v1::GetLoadResponse r;
  stub->GetLoad(&ctx, internal::v1::GetLoadRequest(), &r);
  return r;
}

// GET http://127.0.0.1:port/metrics; the body, or "" on failure.
inline std::string HttpGetMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// A series as written in the text format: its name and labels. Values are
// taken verbatim between the quotes (pdserve's label values hold no quotes).
inline std::pair<std::string, std::map<std::string, std::string>> ParseSeries(const std::string& series) {
  std::map<std::string, std::string> labels;
  const size_t brace = series.find('{');
  if (brace == std::string::npos) return {series, labels};
  size_t pos = brace + 1;
  while (pos < series.size() && series[pos] != '}') {
    const size_t eq = series.find("=\"", pos);
    const size_t close = series.find('"', eq + 2);
    if (eq == std::string::npos || close == std::string::npos) break;
    labels[series.substr(pos, eq - pos)] = series.substr(eq + 2, close - eq - 2);
    pos = close + 1;
    if (pos < series.size() && series[pos] == ',') ++pos;
  }
  return {series.substr(0, brace), labels};
}

// The value of a series (`name` with optional {labels}) in a Prometheus
// text body: the sum over every sample line of that name whose labels
// include the given ones (so the servers' constant `model` label, or a
// label the query leaves out, does not hide a sample); 0 when none.
inline double MetricValue(const std::string& body, const std::string& series) {
  const auto [name, want] = ParseSeries(series);
  double sum = 0;
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string::npos) end = body.size();
    const std::string line = body.substr(start, end - start);
    start = end + 1;
    const size_t space = line.rfind(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    const auto [got_name, got] = ParseSeries(line.substr(0, space));
    if (got_name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      auto it = got.find(k);
      match = match && it != got.end() && it->second == v;
    }
    if (match) sum += std::stod(line.substr(space + 1));
  }
  return sum;
}

// Polls `pred` every 20 ms; true once it holds, false after `timeout`.
inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace pdserve::testing
