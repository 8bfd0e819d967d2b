#include "router/openai_http.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/handoff/crc32c.h"
#include "common/net/grpc_security.h"
#include "common/net/http_server.h"
#include "common/util/log.h"
#include "pdserve/v1/generate.grpc.pb.h"
#include "router/client_disconnect.h"
#include "router/harmony_chat.h"
#include "router/harmony_parser.h"
#include "router/openai_protocol.h"

namespace pdserve {
namespace {

using pdserve::v1::GenerateResponse;

constexpr char kJson[] = "application/json";

uint64_t Random64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// 24 random hex digits after the prefix.
std::string NewRequestId(OpenAiEndpoint endpoint) {
  return absl::StrCat(endpoint == OpenAiEndpoint::kChat ? "chatcmpl-" : "cmpl-",
                      absl::Hex(Random64(), absl::kZeroPad16), absl::Hex(Random64() >> 32, absl::kZeroPad8));
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// One Generate call to the router, alive while its HTTP response is.
struct RouterCall {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader;
  GenerateResponse first;  // read before the HTTP status is chosen
  bool finished = false;
  // The HTTP client went away (its FIN seen, or a write failed): a
  // CANCELLED end is then the client's doing and gets no answer.
  std::atomic<bool> client_gone{false};

  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
  // Ends the call after the HTTP side gave up (client gone): the router
  // cancels its worker calls.
  void Cancel() {
    client_gone = true;
    if (finished) return;
    context.TryCancel();
    GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    Finish();
  }
};

std::vector<HttpHeader> IdHeader(const std::string& id) { return {{"X-Request-Id", id}}; }

// A harmony model's HarmonyChat; nullptr for a template model, or with the
// reason its chat is refused in *refusal when the tokenizer cannot serve it.
std::unique_ptr<HarmonyChat> MakeHarmonyChat(const OpenAiHttpOptions& o, std::string* refusal) {
  if (o.config == nullptr || o.config->chat_format != ChatFormat::kHarmony) return nullptr;
  absl::StatusOr<std::unique_ptr<HarmonyChat>> chat = HarmonyChat::Create(o.tokenizer);
  if (chat.ok()) return *std::move(chat);
  *refusal = absl::StrCat("model '", o.config->name, "' chats in the harmony format, which this server cannot render: ",
                          chat.status().message(), "; use /v1/completions");
  log::Warn(*refusal, {}, log::TextPrefix::Named(o.program.empty() ? "http" : o.program));
  return nullptr;
}

// One router message of a harmony chat as SSE chunks: one per channel
// delta, in order, the finish reason on the last; one without text when
// the message has none (every message is a chunk: see SendStream).
std::vector<CompletionPiece> HarmonyChunks(const CompletionPiece& base, const GenerateResponse& msg,
                                           HarmonyParser* parser) {
  std::vector<HarmonyDelta> deltas;
  for (uint32_t id : msg.token_ids()) parser->Push(id, &deltas);
  if (!base.finish_reason.empty()) parser->Finish(&deltas);
  CompletionPiece empty = base;
  empty.channels = true;
  empty.text.clear();
  empty.reasoning.clear();
  empty.finish_reason.clear();
  std::vector<CompletionPiece> chunks;
  for (HarmonyDelta& d : deltas) {
    chunks.push_back(empty);
    (d.target == HarmonyTarget::kReasoning ? chunks.back().reasoning : chunks.back().text) = std::move(d.text);
  }
  if (chunks.empty()) chunks.push_back(empty);
  chunks.back().finish_reason = base.finish_reason;
  return chunks;
}

}  // namespace

std::string BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(authorization, kScheme) ||
      (authorization[kScheme.size()] != ' ' && authorization[kScheme.size()] != '\t')) {
    return "";
  }
  return std::string(absl::StripAsciiWhitespace(authorization.substr(kScheme.size())));
}

std::string HttpClientIdentity(absl::string_view bearer_token, bool keys_in_use, absl::string_view peer_address) {
  if (keys_in_use && !bearer_token.empty()) {
    // A checksum of the key names it in the logs without printing it.
    return absl::StrCat("key:", absl::Hex(Crc32c(bearer_token.data(), bearer_token.size()), absl::kZeroPad8));
  }
  return absl::StrCat("http:", peer_address);
}

absl::StatusOr<absl::Duration> RequestTimeout(const std::string* header, absl::Duration server_default) {
  if (header == nullptr) return server_default;
  double seconds = 0;
  if (!absl::SimpleAtod(*header, &seconds) || !(seconds > 0) || seconds > 1e9) {
    return absl::InvalidArgumentError(absl::StrCat("X-Request-Timeout '", header->substr(0, 64),
                                                   "' must be a positive number of seconds"));
  }
  return std::min(absl::Seconds(seconds), server_default);
}

class OpenAiHttpServer::Impl {
 public:
  explicit Impl(OpenAiHttpOptions options)
      : options_(std::move(options)),
        stub_(pdserve::v1::Generator::NewStub(options_.channel)),
        harmony_(MakeHarmonyChat(options_, &chat_refusal_)),
        model_{options_.config->name,
               options_.config->max_context,
               options_.config->chat_template ? &*options_.config->chat_template : nullptr,
               UnixNow(),
               harmony_.get(),
               chat_refusal_} {}

  absl::Status Listen();
  void Stop() { server_.reset(); }
  int port() const { return server_->port(); }

 private:
  void Dispatch(const HttpRequest& req, HttpResponseWriter& w);
  bool Authorized(const HttpRequest& req, HttpResponseWriter& w) const;
  void HandleGenerate(OpenAiEndpoint endpoint, const HttpRequest& req, HttpResponseWriter& w);
  std::shared_ptr<RouterCall> StartCall(const HttpRequest& req, const pdserve::v1::GenerateRequest& generate,
                                        absl::Duration timeout);
  void SendWhole(OpenAiEndpoint endpoint, CompletionPiece piece, RouterCall* call, HttpResponseWriter& w);
  void SendStream(const OpenAiRequest& request, CompletionPiece piece, RouterCall* call, HttpResponseWriter& w);
  // A failed call's answer; nothing when the client is gone (logged only).
  void SendCallError(const grpc::Status& st, OpenAiEndpoint endpoint, const RouterCall& call, HttpResponseWriter& w,
                     const std::string& id);

  // A harmony chat's answer parser; nullptr for other answers.
  std::unique_ptr<HarmonyParser> ChannelParser(OpenAiEndpoint endpoint) const;

  const OpenAiHttpOptions options_;
  std::unique_ptr<pdserve::v1::Generator::Stub> stub_;
  std::string chat_refusal_;  // before harmony_, which sets it
  const std::unique_ptr<HarmonyChat> harmony_;
  const ServedModel model_;
  ClientDisconnectWatcher disconnects_;
  std::unique_ptr<HttpServer> server_;
};

namespace {

bool SendError(HttpResponseWriter& w, const OpenAiError& e, const std::vector<HttpHeader>& headers = {}) {
  return w.Send(e.http_status, kJson, ErrorBody(e), headers);
}

// The server's own refusals (deadlines, sizes, connection limit) in
// OpenAI's error shape.
std::pair<std::string, std::string> HttpErrorBody(int status, absl::string_view message) {
  std::string type = "invalid_request_error", code;
  if (status == 503) type = code = "service_unavailable";
  if (status == 408) code = "request_timeout";
  return {kJson, ErrorBody({status, std::string(message), type, "", code})};
}

bool IsCheapGet(const HttpRequest& req) { return req.method == "GET" || req.method == "HEAD"; }

}  // namespace

absl::Status OpenAiHttpServer::Impl::Listen() {
  HttpServerOptions o;
  o.name = options_.program.empty() ? "http" : options_.program;
  o.host = options_.host;
  o.port = options_.port;
  o.tls_cert_file = options_.security.cert_file;
  o.tls_key_file = options_.security.key_file;
  o.max_connections = kMaxConnections;
  o.header_timeout = kHeaderTimeout;
  o.body_timeout = kBodyTimeout;
  o.idle_timeout = kIdleTimeout;
  o.write_timeout = kWriteTimeout;
  o.max_body_bytes = kMaxBodyBytes;
  o.worker_threads = kThreads;
  o.fast_lane = IsCheapGet;
  o.fast_worker_threads = 2;
  o.error_body = HttpErrorBody;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(std::move(o), [this](const HttpRequest& req, HttpResponseWriter& w) { Dispatch(req, w); });
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

void OpenAiHttpServer::Impl::Dispatch(const HttpRequest& req, HttpResponseWriter& w) {
  const bool post = req.method == "POST", get = req.method == "GET";
  if (req.path == "/v1/completions" && post) return HandleGenerate(OpenAiEndpoint::kCompletions, req, w);
  if (req.path == "/v1/chat/completions" && post) return HandleGenerate(OpenAiEndpoint::kChat, req, w);
  if (req.path == "/v1/models" && get) {
    if (Authorized(req, w)) w.Send(200, kJson, ModelsBody(model_));
    return;
  }
  if (req.path == "/health" && get) {
    const absl::Status st = options_.health ? options_.health() : absl::OkStatus();
    w.Send(st.ok() ? 200 : 503, kJson,
           st.ok() ? R"({"status":"ok"})"
                   : ErrorBody({503, std::string(st.message()), "service_unavailable", "", "unhealthy"}));
    return;
  }
  if (req.path == "/metrics" && get) {
    if (options_.metrics == nullptr) {
      SendError(w, {404, "no metrics here", "invalid_request_error", "", "not_found"});
      return;
    }
    w.Send(200, "text/plain; version=0.0.4; charset=utf-8", options_.metrics->Render());
    return;
  }
  const bool known = req.path == "/v1/completions" || req.path == "/v1/chat/completions" ||
                     req.path == "/v1/models" || req.path == "/health" || req.path == "/metrics";
  const int status = known ? 405 : 404;
  SendError(w, {status, absl::StrCat("no route for ", req.method.substr(0, 16), " ", req.path.substr(0, 128)),
                "invalid_request_error", "", known ? "method_not_allowed" : "not_found"});
}

bool OpenAiHttpServer::Impl::Authorized(const HttpRequest& req, HttpResponseWriter& w) const {
  const std::string& key = options_.security.api_key;
  if (key.empty()) return true;
  const std::string* auth = req.Header("Authorization");
  const std::string token = auth == nullptr ? "" : BearerToken(*auth);
  if (!token.empty() && ConstantTimeEquals(token, key)) return true;
  SendError(w, {401, auth == nullptr ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key",
                "authentication_error", "", "invalid_api_key"});
  return false;
}

std::shared_ptr<RouterCall> OpenAiHttpServer::Impl::StartCall(const HttpRequest& req,
                                                              const pdserve::v1::GenerateRequest& generate,
                                                              absl::Duration timeout) {
  auto call = std::make_shared<RouterCall>();
  const std::string* traceparent = req.Header("traceparent");
  if (traceparent != nullptr && traceparent->size() <= 256) call->context.AddMetadata("traceparent", *traceparent);
  const bool keys = !options_.security.api_key.empty();
  if (keys) call->context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.security.api_key));
  const std::string* auth = req.Header("Authorization");
  call->context.AddMetadata("x-pdserve-client",
                            HttpClientIdentity(auth == nullptr ? "" : BearerToken(*auth), keys, req.peer_address));
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  call->reader = stub_->Generate(&call->context, generate);
  return call;
}

void OpenAiHttpServer::Impl::HandleGenerate(OpenAiEndpoint endpoint, const HttpRequest& req, HttpResponseWriter& w) {
  if (!Authorized(req, w)) return;
  const absl::StatusOr<absl::Duration> timeout = RequestTimeout(req.Header("X-Request-Timeout"), options_.request_timeout);
  if (!timeout.ok()) {
    return (void)SendError(w, {400, std::string(timeout.status().message()), "invalid_request_error", "", ""});
  }
  OpenAiRequest request;
  const std::optional<OpenAiError> bad = endpoint == OpenAiEndpoint::kChat
                                             ? ParseChatRequest(req.body, model_, &request)
                                             : ParseCompletionRequest(req.body, model_, &request);
  if (bad) return (void)SendError(w, *bad);
  CompletionPiece piece{NewRequestId(endpoint), UnixNow(), model_.id, "", ""};
  request.generate.set_request_id(piece.id);
  if (!request.seed_given) request.generate.mutable_sampling()->set_seed(Random64());
  std::shared_ptr<RouterCall> call = StartCall(req, request.generate, *timeout);
  {
    // Until there is something to write, a client that closes its
    // connection is noticed only by watching the socket: then the call is
    // cancelled (TryCancel only: the blocked Read returns and the call is
    // finished here). Streams notice a gone client on their writes after.
    const auto watch = disconnects_.Watch(w.fd(), [call] {
      call->client_gone = true;
      call->context.TryCancel();
    });
    // The first message (or the call's failure) picks the HTTP status; an
    // error after it can only travel inside the stream.
    if (!call->reader->Read(&call->first)) {
      return SendCallError(call->Finish(), endpoint, *call, w, piece.id);
    }
    if (!request.stream) return SendWhole(endpoint, std::move(piece), call.get(), w);
  }
  SendStream(request, std::move(piece), call.get(), w);
}

void OpenAiHttpServer::Impl::SendCallError(const grpc::Status& st, OpenAiEndpoint endpoint, const RouterCall& call,
                                           HttpResponseWriter& w, const std::string& id) {
  if (call.client_gone && st.error_code() == grpc::StatusCode::CANCELLED) {
    log::Info(absl::StrCat("request ", id, ": the client went away; cancelled"), {{"request_id", id}},
              log::TextPrefix::Named(options_.program));
    return;  // nobody to answer; the connection is closed after this
  }
  SendError(w,
            ErrorFromGrpc(st, endpoint, ParamFromTrailers(call.context), call.client_gone,
                          ReasonFromTrailers(call.context)),
            IdHeader(id));
}

std::unique_ptr<HarmonyParser> OpenAiHttpServer::Impl::ChannelParser(OpenAiEndpoint endpoint) const {
  if (endpoint != OpenAiEndpoint::kChat || harmony_ == nullptr) return nullptr;
  return std::make_unique<HarmonyParser>(harmony_->tokens(), harmony_->tokenizer());
}

void OpenAiHttpServer::Impl::SendWhole(OpenAiEndpoint endpoint, CompletionPiece piece, RouterCall* call,
                                       HttpResponseWriter& w) {
  const std::unique_ptr<HarmonyParser> parser = ChannelParser(endpoint);
  std::vector<HarmonyDelta> deltas;
  GenerateResponse msg = std::move(call->first);
  pdserve::v1::Usage usage;
  do {
    if (parser != nullptr) {
      for (uint32_t id : msg.token_ids()) parser->Push(id, &deltas);
    } else {
      piece.text += msg.text();
    }
    if (msg.finish_reason() != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
      piece.finish_reason = FinishReasonString(msg.finish_reason());
    }
    if (msg.has_usage()) usage = msg.usage();
  } while (call->reader->Read(&msg));
  const grpc::Status st = call->Finish();
  if (!st.ok()) return SendCallError(st, endpoint, *call, w, piece.id);
  if (parser != nullptr) {
    parser->Finish(&deltas);
    piece.channels = true;
    for (const HarmonyDelta& d : deltas) {
      (d.target == HarmonyTarget::kReasoning ? piece.reasoning : piece.text) += d.text;
    }
  }
  w.Send(200, kJson, CompletionBody(endpoint, piece, usage), IdHeader(piece.id));
}

void OpenAiHttpServer::Impl::SendStream(const OpenAiRequest& request, CompletionPiece piece, RouterCall* call,
                                        HttpResponseWriter& w) {
  const OpenAiEndpoint endpoint = request.endpoint;
  std::vector<HttpHeader> headers = IdHeader(piece.id);
  headers.push_back({"Cache-Control", "no-cache"});
  auto send = [&w](const std::string& json) { return w.Write(absl::StrCat("data: ", json, "\n\n")); };
  if (!w.StartStream(200, "text/event-stream", headers)) return call->Cancel();
  const std::unique_ptr<HarmonyParser> parser = ChannelParser(endpoint);
  GenerateResponse msg = std::move(call->first);
  pdserve::v1::Usage usage;
  bool first = true;
  do {
    piece.text = msg.text();
    piece.finish_reason = FinishReasonString(msg.finish_reason());
    if (msg.has_usage()) usage = msg.usage();
    // Every message is a chunk, text or not: a write per token notices a
    // client that went away within a token or two. A harmony chat's
    // message may be several (one per channel it touches).
    const std::vector<CompletionPiece> chunks =
        parser != nullptr ? HarmonyChunks(piece, msg, parser.get()) : std::vector<CompletionPiece>{piece};
    for (const CompletionPiece& chunk : chunks) {
      if (!send(ChunkBody(endpoint, chunk, first, request.include_usage))) return call->Cancel();
      first = false;
    }
  } while (call->reader->Read(&msg));
  const grpc::Status st = call->Finish();
  bool ok = true;
  if (!st.ok()) {
    ok = send(ErrorBody(ErrorFromGrpc(st, endpoint, ParamFromTrailers(call->context), call->client_gone,
                                      ReasonFromTrailers(call->context))));
  } else if (request.include_usage) {
    ok = send(UsageChunkBody(endpoint, piece, usage));
  }
  if (ok && send("[DONE]")) w.EndStream();
}

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(OpenAiHttpOptions options) {
  if (options.config == nullptr || options.channel == nullptr) {
    return absl::InvalidArgumentError("OpenAiHttpServer needs a model config and a channel to the router");
  }
  std::signal(SIGPIPE, SIG_IGN);  // belt and braces: the server writes with MSG_NOSIGNAL
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
