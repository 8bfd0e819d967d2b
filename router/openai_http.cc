#include "router/openai_http.h"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "common/net/httplib_config.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/util/log.h"
#include "pdserve/v1/generate.grpc.pb.h"
#include "router/client_disconnect.h"
#include "router/openai_protocol.h"

namespace pdserve {
namespace {

using pdserve::v1::GenerateResponse;

constexpr char kJson[] = "application/json";

void SendError(httplib::Response& res, const OpenAiError& e) {
  res.status = e.http_status;
  res.set_content(ErrorBody(e), kJson);
}

uint64_t Random64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// 24 random hex digits after the prefix.
std::string NewRequestId(OpenAiEndpoint endpoint) {
  return absl::StrCat(endpoint == OpenAiEndpoint::kChat ? "chatcmpl-" : "cmpl-",
                      absl::Hex(Random64(), absl::kZeroPad16), absl::Hex(Random64() >> 32, absl::kZeroPad8));
}

// Compares without an early exit, so the time taken says nothing of the key.
bool KeyMatches(const std::string& given, const std::string& want) {
  unsigned char diff = given.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= given[i] ^ want[i % want.size()];
  return diff == 0;
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// One Generate call to the router, alive while its HTTP response is.
struct RouterCall {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader;
  GenerateResponse first;  // read before the HTTP status is chosen
  bool finished = false;

  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
  // Ends the call after the HTTP side gave up (client gone): the router
  // cancels its worker calls.
  void Cancel() {
    if (finished) return;
    context.TryCancel();
    GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    Finish();
  }
};

}  // namespace

class OpenAiHttpServer::Impl {
 public:
  explicit Impl(OpenAiHttpOptions options)
      : options_(std::move(options)),
        stub_(pdserve::v1::Generator::NewStub(options_.channel)),
        model_{options_.config->name, options_.config->max_context,
               options_.config->chat_template ? &*options_.config->chat_template : nullptr, UnixNow()} {}

  absl::Status Listen();
  void Stop();
  int port() const { return port_; }

 private:
  void Routes();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  std::shared_ptr<RouterCall> StartCall(const httplib::Request& req, const pdserve::v1::GenerateRequest& generate);
  std::unique_ptr<ClientDisconnectWatcher::Handle> WatchClient(const httplib::Request& req,
                                                               const std::shared_ptr<RouterCall>& call);
  void SendWhole(OpenAiEndpoint endpoint, CompletionPiece piece, RouterCall* call, httplib::Response& res);
  void SendStream(const OpenAiRequest& request, CompletionPiece piece, std::shared_ptr<RouterCall> call,
                  httplib::Response& res);

  const OpenAiHttpOptions options_;
  std::unique_ptr<pdserve::v1::Generator::Stub> stub_;
  const ServedModel model_;
  ClientDisconnectWatcher disconnects_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = -1;
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
};

absl::Status OpenAiHttpServer::Impl::Listen() {
  const SecurityOptions& sec = options_.security;
  if (sec.tls()) {
    server_ = std::make_unique<httplib::SSLServer>(sec.cert_file.c_str(), sec.key_file.c_str());
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  if (!server_->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("HTTPS: cannot load --tls-cert '", sec.cert_file,
                                                   "' / --tls-key '", sec.key_file, "'"));
  }
  server_->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server_->set_read_timeout(kReadTimeoutSeconds, 0);
  server_->set_write_timeout(kWriteTimeoutSeconds, 0);
  // SSE: each chunk goes out at once, not behind Nagle waiting for the
  // client's (delayed, up to 40 ms) ACK of the previous write.
  server_->set_tcp_nodelay(true);
  server_->set_payload_max_length(kMaxBodyBytes);
  server_->set_socket_options([](int sock) {  // SO_REUSEADDR only: no second server on the same port
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  Routes();
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                             : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind HTTP on ", options_.host, ":", options_.port));
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // stop() does nothing until the accept loop runs.
  while (!server_->is_running() && !listen_returned_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return absl::OkStatus();
}

void OpenAiHttpServer::Impl::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void OpenAiHttpServer::Impl::Routes() {
  httplib::Server& s = *server_;
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kChat, req, res);
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) res.set_content(ModelsBody(model_), kJson);
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Status st = options_.health ? options_.health() : absl::OkStatus();
    res.status = st.ok() ? 200 : 503;
    res.set_content(st.ok() ? R"({"status":"ok"})"
                            : ErrorBody({503, std::string(st.message()), "service_unavailable", "", "unhealthy"}),
                    kJson);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (options_.metrics == nullptr) return SendError(res, {404, "no metrics here", "invalid_request_error", "", ""});
    res.set_content(options_.metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    // Only httplib's own 404/405 (no route); the handlers' errors have bodies.
    if ((res.status != 404 && res.status != 405) || !res.body.empty()) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(res, {res.status, absl::StrCat("no route for ", req.method, " ", req.path.substr(0, 128)),
                    "invalid_request_error", "", "not_found"});
    return httplib::Server::HandlerResponse::Handled;
  }));
}

bool OpenAiHttpServer::Impl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  const std::string& key = options_.security.api_key;
  if (key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  if (absl::StartsWith(auth, "Bearer ") && KeyMatches(auth.substr(7), key)) return true;
  SendError(res, {401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key",
                  "authentication_error", "", "invalid_api_key"});
  return false;
}

std::shared_ptr<RouterCall> OpenAiHttpServer::Impl::StartCall(const httplib::Request& req,
                                                              const pdserve::v1::GenerateRequest& generate) {
  auto call = std::make_shared<RouterCall>();
  const std::string traceparent = req.get_header_value("traceparent");
  if (!traceparent.empty() && traceparent.size() <= 256) call->context.AddMetadata("traceparent", traceparent);
  if (!options_.security.api_key.empty()) {
    call->context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.security.api_key));
  }
  call->reader = stub_->Generate(&call->context, generate);
  return call;
}

// Until the handler has something to write, a client that closes its
// connection is noticed only by watching the socket: then the call is
// cancelled (TryCancel only: the handler's blocked Read returns and it
// finishes the call). No socket found (an address format not matched):
// the request runs to its end as before.
std::unique_ptr<ClientDisconnectWatcher::Handle> OpenAiHttpServer::Impl::WatchClient(
    const httplib::Request& req, const std::shared_ptr<RouterCall>& call) {
  const absl::StatusOr<int> fd = FindAcceptedSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (!fd.ok()) return nullptr;
  return disconnects_.Watch(*fd, [call] { call->context.TryCancel(); });
}

void OpenAiHttpServer::Impl::HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& req,
                                            httplib::Response& res) {
  if (!Authorized(req, res)) return;
  OpenAiRequest request;
  const std::optional<OpenAiError> bad = endpoint == OpenAiEndpoint::kChat
                                             ? ParseChatRequest(req.body, model_, &request)
                                             : ParseCompletionRequest(req.body, model_, &request);
  if (bad) return SendError(res, *bad);
  CompletionPiece piece{NewRequestId(endpoint), UnixNow(), model_.id, "", ""};
  request.generate.set_request_id(piece.id);
  if (!request.seed_given) request.generate.mutable_sampling()->set_seed(Random64());
  res.set_header("X-Request-Id", piece.id);
  std::shared_ptr<RouterCall> call = StartCall(req, request.generate);
  const auto watch = WatchClient(req, call);  // until this handler returns (a stream's writes notice it after)
  // The first message (or the call's failure) picks the HTTP status; an
  // error after it can only travel inside the stream.
  if (!call->reader->Read(&call->first)) return SendError(res, ErrorFromGrpc(call->Finish(), endpoint));
  if (request.stream) return SendStream(request, std::move(piece), std::move(call), res);
  SendWhole(endpoint, std::move(piece), call.get(), res);
}

void OpenAiHttpServer::Impl::SendWhole(OpenAiEndpoint endpoint, CompletionPiece piece, RouterCall* call,
                                       httplib::Response& res) {
  GenerateResponse msg = std::move(call->first);
  pdserve::v1::Usage usage;
  do {
    piece.text += msg.text();
    if (msg.finish_reason() != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
      piece.finish_reason = FinishReasonString(msg.finish_reason());
    }
    if (msg.has_usage()) usage = msg.usage();
  } while (call->reader->Read(&msg));
  const grpc::Status st = call->Finish();
  if (!st.ok()) return SendError(res, ErrorFromGrpc(st, endpoint));
  res.set_content(CompletionBody(endpoint, piece, usage), kJson);
}

void OpenAiHttpServer::Impl::SendStream(const OpenAiRequest& request, CompletionPiece piece,
                                        std::shared_ptr<RouterCall> call, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  const OpenAiEndpoint endpoint = request.endpoint;
  const bool include_usage = request.include_usage;
  auto provider = [endpoint, include_usage, piece = std::move(piece), call](size_t, httplib::DataSink& sink) mutable {
    auto send = [&sink](const std::string& json) {
      const std::string event = absl::StrCat("data: ", json, "\n\n");
      return sink.write(event.data(), event.size());
    };
    GenerateResponse msg = std::move(call->first);
    pdserve::v1::Usage usage;
    bool first = true;
    do {
      piece.text = msg.text();
      piece.finish_reason = FinishReasonString(msg.finish_reason());
      if (msg.has_usage()) usage = msg.usage();
      // Every message is a chunk, text or not: a write per token notices a
      // client that went away within a token or two.
      if (!send(ChunkBody(endpoint, piece, first, include_usage))) {
        call->Cancel();  // the client is gone
        return false;
      }
      first = false;
    } while (call->reader->Read(&msg));
    const grpc::Status st = call->Finish();
    bool ok = true;
    if (!st.ok()) {
      ok = send(ErrorBody(ErrorFromGrpc(st, endpoint)));
    } else if (include_usage) {
      ok = send(UsageChunkBody(endpoint, piece, usage));
    }
    ok = ok && send("[DONE]");
    if (ok) sink.done();
    return ok;
  };
  // The releaser also covers a response httplib gave up on before the
  // provider ran (headers not written).
  res.set_chunked_content_provider("text/event-stream", std::move(provider), [call](bool) { call->Cancel(); });
}

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(OpenAiHttpOptions options) {
  if (options.config == nullptr || options.channel == nullptr) {
    return absl::InvalidArgumentError("OpenAiHttpServer needs a model config and a channel to the router");
  }
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not a dead process
  auto impl = std::make_unique<Impl>(std::move(options));
  absl::Status st = impl->Listen();
  if (!st.ok()) return st;
  return std::unique_ptr<OpenAiHttpServer>(new OpenAiHttpServer(std::move(impl)));
}

OpenAiHttpServer::OpenAiHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiHttpServer::~OpenAiHttpServer() { impl_->Stop(); }
int OpenAiHttpServer::port() const { return impl_->port(); }

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> ServeOpenAiHttp(const std::string& listen,
                                                                  OpenAiHttpOptions options) {
  if (listen.empty()) return std::unique_ptr<OpenAiHttpServer>();
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen '", listen, "' must be HOST:PORT (port 0 picks one)"));
  }
  options.host = listen.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[' && options.host.back() == ']') {
    options.host = options.host.substr(1, options.host.size() - 2);  // [::1]:8000
  }
  options.port = port;
  const std::string program = options.program, host = options.host;
  const bool tls = options.security.tls();
  auto server = OpenAiHttpServer::Start(std::move(options));
  if (!server.ok()) return server.status();
  // "http on port N" is parsed by the tests (tests/e2e/openai_http_e2e_test.sh).
  log::Info(absl::StrCat("http on port ", (*server)->port(), " (", tls ? "https " : "", host, ":", (*server)->port(), ")"),
            {{"http_port", (*server)->port()}}, log::TextPrefix::Named(program));
  return server;
}

}  // namespace pdserve
