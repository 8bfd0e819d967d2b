#include "bench/backends.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/cli/finish_reason.h"
#include "common/cli/usage_json.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/generate.grpc.pb.h"

namespace pdserve::bench {
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);

// ---- gRPC: the router's Generate stream, one message per decode step.

class GrpcBackend : public Backend {
 public:
  GrpcBackend(std::unique_ptr<v1::Generator::Stub> stub, std::string api_key)
      : stub_(std::move(stub)), api_key_(std::move(api_key)) {}

  void Run(const BackendRequest& req, Clock::time_point sent, BackendResult* out) override {
    v1::GenerateRequest g;
    g.set_request_id(req.request_id);
    for (uint32_t id : req.prompt_ids) g.add_token_ids(id);
    v1::SamplingParams* s = g.mutable_sampling();
    s->set_max_new_tokens(static_cast<uint32_t>(req.max_tokens));
    s->set_temperature(req.temperature);
    s->set_top_p(req.top_p);
    s->set_seed(req.seed);
    s->set_ignore_eos(req.ignore_eos);

    grpc::ClientContext ctx;
    if (!api_key_.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", api_key_));
    if (req.deadline_s > 0) {
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(req.deadline_s * 1e6)));
    }
    StreamTimer timer(sent, out);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub_->Generate(&ctx, g);
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      if (resp.token_ids_size() > 0) timer.OnTokens(resp.token_ids_size(), Clock::now());
      if (resp.has_usage()) out->usage = UsageToJson(resp.usage());
      if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out->finish_reason = FinishReasonName(resp.finish_reason());
    }
    const grpc::Status status = reader->Finish();
    timer.Finish(Clock::now());
    out->timing.ok = status.ok();
    if (!status.ok()) {
      out->error_code = GrpcCodeName(status.error_code());
      out->error = status.error_message();
    }
  }

 private:
  std::unique_ptr<v1::Generator::Stub> stub_;
  std::string api_key_;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeGrpc(const BackendOptions& opt) {
  ChannelSecurity security = opt.grpc_security;
  security.api_key.clear();  // GrpcBackend sends opt.api_key itself, once
  auto channel = MakeChannel(opt.router, security);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + kConnectTimeout)) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the router at ", opt.router, " within 10 s"));
  }
  return std::make_unique<GrpcBackend>(v1::Generator::NewStub(channel), opt.api_key);
}

// ---- OpenAI: POST /v1/completions, stream: true, Server-Sent Events.

// The error message of an OpenAI-shaped body ({"error": {"message": ...}}),
// else the body itself (cut to 300 bytes).
std::string ErrorMessage(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const nlohmann::json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 300);
}

// What one stream's SSE events said.
struct SseOutcome {
  bool done = false;  // "data: [DONE]" arrived
  std::string error;  // an error event, or data that is not JSON
  int64_t token_events = 0;  // chunks holding a choice
};

// One event's data: a chunk holding a choice is a token-holding message
// (TTFT, ITL), whether or not its text is empty (a token may have no text of
// its own: ids without bytes, part of a UTF-8 character), as `vllm bench
// serve` counts them; the finish reason and usage are kept; [DONE] ends the
// stream.
void OnEvent(const std::string& data, Clock::time_point now, StreamTimer* timer, BackendResult* out, SseOutcome* s) {
  if (data == "[DONE]") {
    s->done = true;
    return;
  }
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(data, nullptr, false);
  if (!j.is_object()) {
    s->error = absl::StrCat("SSE data is not a JSON object: ", data.substr(0, 200));
    return;
  }
  if (j.contains("error")) {
    s->error = ErrorMessage(data);
    return;
  }
  if (j.contains("usage") && j["usage"].is_object()) out->usage = j["usage"];
  if (!j.contains("choices") || !j["choices"].is_array()) return;
  if (j["choices"].empty()) return;  // the usage chunk
  timer->OnTokens(1, now);  // the real count comes from usage at the end
  ++s->token_events;
  for (const auto& c : j["choices"]) {
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) out->finish_reason = c["finish_reason"];
  }
}

// Reusable keep-alive connections, one per request in flight.
class ClientPool {
 public:
  ClientPool(std::string host, httplib::Headers headers, double read_timeout_s)
      : host_(std::move(host)), headers_(std::move(headers)), read_timeout_s_(read_timeout_s) {}

  std::unique_ptr<httplib::Client> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<httplib::Client> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    auto c = std::make_unique<httplib::Client>(host_);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // else Nagle holds the body behind the headers (a 40 ms delayed ACK)
    c->set_default_headers(headers_);
    c->set_connection_timeout(std::chrono::seconds(10));
    c->set_read_timeout(std::chrono::microseconds(static_cast<int64_t>(read_timeout_s_ * 1e6)));
    return c;
  }
  void Give(std::unique_ptr<httplib::Client> c) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(c));
  }

 private:
  const std::string host_;
  const httplib::Headers headers_;
  const double read_timeout_s_;
  std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;
};

class OpenAiBackend : public Backend {
 public:
  OpenAiBackend(std::unique_ptr<ClientPool> pool, std::string model) : pool_(std::move(pool)), model_(std::move(model)) {}

  void Run(const BackendRequest& req, Clock::time_point sent, BackendResult* out) override {
    httplib::Request hr;
    hr.method = "POST";
    hr.path = "/v1/completions";
    hr.set_header("Content-Type", "application/json");
    hr.body = RequestBody(req).dump();
    StreamTimer timer(sent, out);
    SseParser sse;
    SseOutcome s;
    std::string raw;  // the start of the body, for a non-200 answer's message
    hr.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      const Clock::time_point now = Clock::now();
      if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096 - raw.size()));
      for (const std::string& ev : sse.Feed(absl::string_view(data, n))) OnEvent(ev, now, &timer, out, &s);
      return true;
    };
    std::unique_ptr<httplib::Client> client = pool_->Take();
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent_ok = client->send(hr, res, err);
    timer.Finish(Clock::now());
    pool_->Give(std::move(client));
    Conclude(sent_ok ? res.status : 0, err, raw, s, req.deadline_s, out);
  }

 private:
  nlohmann::json RequestBody(const BackendRequest& req) const {
    return {{"model", model_},
            {"prompt", req.prompt_ids},
            {"max_tokens", req.max_tokens},
            {"temperature", std::max(0.0f, req.temperature)},
            {"top_p", req.top_p},
            {"seed", req.seed},
            {"ignore_eos", req.ignore_eos},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  }

  // ok only for a 200 whose stream ended in [DONE] without an error event.
  static void Conclude(int status, httplib::Error err, const std::string& raw, const SseOutcome& s, double deadline_s,
                       BackendResult* out) {
    if (status == 0) {
      const bool timed_out = err == httplib::Error::Read && deadline_s > 0;
      out->error_code = timed_out ? "DEADLINE_EXCEEDED" : "HTTP_TRANSPORT";
      out->error = httplib::to_string(err);
    } else if (status != 200) {
      out->error_code = absl::StrCat("HTTP_", status);
      out->error = ErrorMessage(raw);
    } else if (!s.error.empty()) {
      out->error_code = "STREAM_ERROR";
      out->error = s.error;
    } else if (!s.done) {
      out->error_code = "STREAM_TRUNCATED";
      out->error = "the stream ended without data: [DONE]";
    }
    out->timing.ok = out->error_code.empty();
    // Tokens, not text chunks: a chunk may hold several tokens or none.
    if (out->usage && out->usage->contains("completion_tokens")) {
      out->timing.output_tokens = (*out->usage)["completion_tokens"].get<int64_t>();
    }
    // Tokens without a chunk of their own: first seen at the end.
    if (s.token_events == 0 && out->timing.output_tokens > 0) out->timing.ttft_ms = out->timing.e2el_ms;
  }

  std::unique_ptr<ClientPool> pool_;
  std::string model_;
};

// GET /v1/models until it answers (10 s): the first model's id unless one is
// given.
absl::StatusOr<std::string> ProbeModel(ClientPool* pool, const BackendOptions& opt) {
  const auto until = std::chrono::steady_clock::now() + kConnectTimeout;
  std::unique_ptr<httplib::Client> c = pool->Take();
  for (;;) {
    httplib::Result r = c->Get("/v1/models");
    if (r && r->status == 200) {
      if (!opt.model.empty()) return opt.model;
      const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
        return j["data"][0]["id"].get<std::string>();
      }
      return absl::FailedPreconditionError(absl::StrCat("GET ", opt.base_url, "/v1/models: no model id in ", r->body));
    }
    if (r) {
      return absl::FailedPreconditionError(
          absl::StrCat("GET ", opt.base_url, "/v1/models: HTTP ", r->status, ": ", ErrorMessage(r->body)));
    }
    if (std::chrono::steady_clock::now() > until) {
      return absl::UnavailableError(absl::StrCat("cannot connect to the HTTP API at ", opt.base_url, " within 10 s (",
                                                 httplib::to_string(r.error()), ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<std::unique_ptr<Backend>> MakeOpenAi(const BackendOptions& opt, double read_timeout_s) {
  absl::string_view url = opt.base_url;
  absl::ConsumeSuffix(&url, "/");
  absl::ConsumeSuffix(&url, "/v1");
  if (!absl::StartsWith(url, "http://") || url.size() <= 7 || absl::StrContains(url.substr(7), "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--base-url '", opt.base_url, "' is not http://HOST:PORT (optionally ending in /v1)"));
  }
  httplib::Headers headers;
  if (!opt.api_key.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", opt.api_key));
  auto pool = std::make_unique<ClientPool>(std::string(url), std::move(headers), read_timeout_s);
  absl::StatusOr<std::string> model = ProbeModel(pool.get(), opt);
  if (!model.ok()) return model.status();
  return std::make_unique<OpenAiBackend>(std::move(pool), *std::move(model));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& opt) {
  if (opt.name == "grpc") return MakeGrpc(opt);
  if (opt.name == "openai") return MakeOpenAi(opt, opt.deadline_s > 0 ? opt.deadline_s : 3600.0);
  return absl::InvalidArgumentError(absl::StrCat("--backend '", opt.name, "' is not grpc or openai"));
}

}  // namespace pdserve::bench
