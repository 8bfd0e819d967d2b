// RouterService black-box, in one process: the real service on a loopback
// gRPC server, with real WorkerPools polling fake prefill and decode workers
// (pdserve.internal.v1 services plus gRPC's default health service) that
// each follow a script: serve, fail with a code (and a failed side in the
// trailing metadata), or hang until cancelled. The fakes hand off through a
// shared board: the decode worker streams only after the prefill worker
// "pushed" that request id. Only public API: the constructor, Generate over
// gRPC, and WorkerPool.
#include "router/router_service.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/net/grpc_status.h"
#include "common/tokenizer/char_tokenizer.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "pdserve/v1/generate.grpc.pb.h"

namespace pdserve {
namespace {

using internal::v1::DecodeRequest;
using internal::v1::DecodeResponse;
using internal::v1::GetLoadRequest;
using internal::v1::GetLoadResponse;
using internal::v1::PrefillRequest;
using internal::v1::PrefillResponse;

// What a fake worker does with one call.
struct Action {
  // kPushThenFail: a prefill worker that hands the K/V off, then fails
  // its own call (after the decode worker streamed when `after_stream`);
  // with code OK it answers OK instead, late (ServeAfterStream).
  // kStreamAtOnce: a decode worker that streams without waiting for the
  // hand-off (a misbehaving one: a real worker has no K/V to decode yet).
  // kAdmitThenFail: a decode worker that admits, waits for the request's
  // Prefill call, then fails as a timed-out hand-off does (`side`, and
  // pdserve-handoff-not-begun when `not_begun`).
  enum Kind { kServe, kFail, kHang, kPushThenFail, kStreamAtOnce, kAdmitThenFail } kind = kServe;
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string side;  // pdserve-failed-side of a kFail ("" = none)
  bool after_stream = false;
  bool not_begun = false;
};
Action Fail(grpc::StatusCode code, std::string side = "") { return {Action::kFail, code, std::move(side)}; }
Action Hang() { return {Action::kHang, grpc::StatusCode::OK, ""}; }
Action StreamAtOnce() { return {Action::kStreamAtOnce, grpc::StatusCode::OK, ""}; }
Action PushThenFail(grpc::StatusCode code, bool after_stream) {
  return {Action::kPushThenFail, code, "", after_stream};
}
Action ServeAfterStream() { return PushThenFail(grpc::StatusCode::OK, /*after_stream=*/true); }
Action HandoffTimedOut(bool not_begun) {
  return {Action::kAdmitThenFail, grpc::StatusCode::UNAVAILABLE, "prefill", false, not_begun};
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// A set of request ids, shared by the fakes' threads.
class IdSet {
 public:
  void Add(const std::string& rid) {
    absl::MutexLock lock(&mu_);
    ids_.insert(rid);
  }
  bool Has(const std::string& rid) {
    absl::MutexLock lock(&mu_);
    return ids_.contains(rid);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> ids_;
};

// What the fakes did, by request id: a prefill worker was called for it
// and "pushed" its K/V, the decode workers streamed a token of it.
struct Board {
  IdSet prefill_called, pushed, streamed;
};

// The script, the load and what was seen, shared by both fakes.
class Script {
 public:
  void Then(Action a) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(a));
  }
  void SetDefault(Action a) {
    absl::MutexLock lock(&mu_);
    default_ = std::move(a);
  }
  void SetLoad(const GetLoadResponse& load) {
    absl::MutexLock lock(&mu_);
    load_ = load;
  }
  GetLoadResponse load() {
    absl::MutexLock lock(&mu_);
    return load_;
  }
  // The next action, and records the call.
  Action Next(const std::string& what) {
    absl::MutexLock lock(&mu_);
    seen_.push_back(what);
    if (script_.empty()) return default_;
    Action a = script_.front();
    script_.pop_front();
    return a;
  }
  void CountCancelled() {
    absl::MutexLock lock(&mu_);
    ++cancelled_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(seen_.size());
  }
  int cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  std::vector<std::string> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::deque<Action> script_;
  Action default_;
  GetLoadResponse load_;
  std::vector<std::string> seen_;  // per call: what the call named
  int cancelled_ = 0;
};

// Blocks until `ready` or the call is cancelled; false when cancelled.
bool WaitOrCancelled(grpc::ServerContext* ctx, const std::function<bool()>& ready) {
  while (!ctx->IsCancelled()) {
    if (ready()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

grpc::Status Failed(grpc::ServerContext* ctx, const Action& a) {
  if (!a.side.empty()) ctx->AddTrailingMetadata(kFailedSideKey, a.side);
  if (a.not_begun) ctx->AddTrailingMetadata(kHandoffNotBegunKey, "1");
  return grpc::Status(a.code, absl::StrCat("scripted ", GrpcCodeName(a.code)));
}

class FakePrefill final : public internal::v1::PrefillWorker::Service {
 public:
  FakePrefill(Board* board, Script* script) : board_(board), script_(script) {}
  // Records "rid -> decode_address".
  grpc::Status Prefill(grpc::ServerContext* ctx, const PrefillRequest* req, PrefillResponse* resp) override {
    const Action a = script_->Next(absl::StrCat(req->request_id(), " -> ", req->decode_address()));
    board_->prefill_called.Add(req->request_id());
    if (a.kind == Action::kFail) return Failed(ctx, a);
    if (a.kind == Action::kHang) {
      WaitOrCancelled(ctx, [] { return false; });
      script_->CountCancelled();
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    board_->pushed.Add(req->request_id());
    if (a.kind == Action::kPushThenFail) {
      if (a.after_stream) WaitOrCancelled(ctx, [&] { return board_->streamed.Has(req->request_id()); });
      if (a.code != grpc::StatusCode::OK) return Failed(ctx, a);
    }
    resp->set_first_token(req->token_ids(0));
    return grpc::Status::OK;
  }
  grpc::Status GetLoad(grpc::ServerContext*, const GetLoadRequest*, GetLoadResponse* resp) override {
    *resp = script_->load();
    return grpc::Status::OK;
  }

 private:
  Board* board_;
  Script* script_;
};

// Serving: admits, waits for the hand-off, then streams `tokens` two per
// message, the last with FINISH_REASON_LENGTH.
class FakeDecode final : public internal::v1::DecodeWorker::Service {
 public:
  FakeDecode(Board* board, Script* script, std::vector<uint32_t> tokens)
      : board_(board), script_(script), tokens_(std::move(tokens)) {}
  // Records the request id.
  grpc::Status Decode(grpc::ServerContext* ctx, const DecodeRequest* req,
                      grpc::ServerWriter<DecodeResponse>* writer) override {
    const Action a = script_->Next(req->request_id());
    if (a.kind == Action::kFail) return Failed(ctx, a);
    DecodeResponse admitted;
    admitted.set_admitted(true);
    writer->Write(admitted);
    const std::string rid = req->request_id();
    if (a.kind == Action::kAdmitThenFail) {
      if (!WaitOrCancelled(ctx, [&] { return board_->prefill_called.Has(rid); })) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      return Failed(ctx, a);
    }
    const bool at_once = a.kind == Action::kStreamAtOnce;
    if (!WaitOrCancelled(ctx, [&] { return at_once || req->prefill_locally() || board_->pushed.Has(rid); }) ||
        (a.kind == Action::kHang && !WaitOrCancelled(ctx, [] { return false; }))) {
      script_->CountCancelled();
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    for (size_t i = 0; i < tokens_.size(); i += 2) {
      DecodeResponse msg;
      for (size_t j = i; j < std::min(i + 2, tokens_.size()); ++j) msg.add_token_ids(tokens_[j]);
      if (i + 2 >= tokens_.size()) msg.set_finish_reason(pdserve::v1::FINISH_REASON_LENGTH);
      writer->Write(msg);
      board_->streamed.Add(rid);
    }
    return grpc::Status::OK;
  }
  grpc::Status GetLoad(grpc::ServerContext*, const GetLoadRequest*, GetLoadResponse* resp) override {
    *resp = script_->load();
    return grpc::Status::OK;
  }

 private:
  Board* board_;
  Script* script_;
  const std::vector<uint32_t> tokens_;
};

// One fake worker process: its service on its own loopback server.
struct FakeWorker {
  Script script;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;

  void Start() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service.get());
    server = b.BuildAndStart();
    ASSERT_NE(server, nullptr);
    address = absl::StrCat("127.0.0.1:", port);
  }
};

constexpr uint32_t kH = 'h', kI = 'i', kJ = 'j';

class RouterServiceTest : public ::testing::Test {
 protected:
  // n_prefill and n_decode workers. Worker 0 of each kind is the one the
  // pool prefers (most free KV; fewest queued), worker 1 the next.
  void StartStack(int n_prefill, int n_decode, RouterOptions options = {}) {
    for (int i = 0; i < n_prefill; ++i) {
      auto w = std::make_unique<FakeWorker>();
      w->service = std::make_unique<FakePrefill>(&board_, &w->script);
      GetLoadResponse load;
      load.set_queued_requests(i * 5);
      w->script.SetLoad(load);
      w->Start();
      prefill_addresses_.push_back(w->address);
      prefill_.push_back(std::move(w));
    }
    for (int i = 0; i < n_decode; ++i) {
      auto worker = std::make_unique<FakeWorker>();
      worker->service = std::make_unique<FakeDecode>(&board_, &worker->script, std::vector<uint32_t>{kH, kI, kJ});
      GetLoadResponse load;
      load.set_kv_bytes_free(1000000 - i * 1000);
      worker->script.SetLoad(load);
      worker->Start();
      decode_addresses_.push_back(worker->address);
      decode_.push_back(std::move(worker));
    }
    WorkerPoolOptions po;
    po.poll_interval = absl::Milliseconds(100);
    po.addresses = prefill_addresses_;
    prefill_pool_ = std::make_unique<WorkerPool>(WorkerKind::kPrefill, po);
    po.addresses = decode_addresses_;
    decode_pool_ = std::make_unique<WorkerPool>(WorkerKind::kDecode, po);
    prefill_pool_->Start();
    decode_pool_->Start();
    ASSERT_TRUE(prefill_pool_->WaitForHealthy(n_prefill, absl::Seconds(10)).ok());
    ASSERT_TRUE(decode_pool_->WaitForHealthy(n_decode, absl::Seconds(10)).ok());

    ModelConfig config;
    config.vocab_size = 256;
    config.max_context = 4096;
    auto tok = CharTokenizer::Create(256);
    ASSERT_TRUE(tok.ok()) << tok.status();
    options.log_requests = log_requests_;
    router_ = std::make_unique<RouterService>(config, std::move(*tok), prefill_pool_.get(), decode_pool_.get(),
                                              options);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(router_.get());
    router_server_ = b.BuildAndStart();
    ASSERT_NE(router_server_, nullptr);
    stub_ = pdserve::v1::Generator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (router_server_) router_server_->Shutdown(std::chrono::system_clock::now());
    router_.reset();
    prefill_pool_.reset();
    decode_pool_.reset();
    for (auto& w : prefill_) w->server->Shutdown(std::chrono::system_clock::now());
    for (auto& w : decode_) w->server->Shutdown(std::chrono::system_clock::now());
  }

  static pdserve::v1::GenerateRequest Request() {
    pdserve::v1::GenerateRequest req;
    req.set_request_id("client-1");
    for (uint32_t id : {'a', 'b', 'c', 'd'}) req.add_token_ids(id);
    req.mutable_sampling()->set_max_new_tokens(3);
    return req;
  }

  struct Result {
    grpc::Status status;
    std::vector<uint32_t> tokens;
    std::string text;
    std::vector<pdserve::v1::GenerateResponse> messages;
  };

  // One Generate, read to the end. `setup` may set a deadline.
  Result Generate(const std::function<void(grpc::ClientContext*)>& setup = nullptr,
                  pdserve::v1::GenerateRequest req = Request()) {
    grpc::ClientContext ctx;
    if (setup) setup(&ctx);
    return GenerateWith(&ctx, std::move(req));
  }

  Result GenerateWith(grpc::ClientContext* ctx, const pdserve::v1::GenerateRequest& req = Request()) {
    Result r;
    auto reader = stub_->Generate(ctx, req);
    pdserve::v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      r.tokens.insert(r.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
      r.text += msg.text();
      r.messages.push_back(msg);
    }
    r.status = reader->Finish();
    return r;
  }

  // A Generate on its own thread, with a context the test may cancel at
  // any time (it lives as long as this object).
  class BackgroundCall {
   public:
    explicit BackgroundCall(RouterServiceTest* test)
        : thread_([this, test] {
            result_ = test->GenerateWith(&ctx_);
            done_ = true;
          }) {}
    ~BackgroundCall() {
      if (thread_.joinable()) thread_.join();
    }
    bool Running() const { return !done_; }
    // Cancels the call; false when it had already ended.
    bool Cancel() {
      const bool running = !done_;
      ctx_.TryCancel();
      return running;
    }
    Result Join() {
      thread_.join();
      return result_;
    }

   private:
    grpc::ClientContext ctx_;
    std::atomic<bool> done_{false};
    Result result_;
    std::thread thread_;  // last: starts once the rest is built
  };

  // Polls metrics_ (up to 5 s) until its rendering has `line` as a whole
  // line; the router records some series after a stream ends.
  bool MetricsShowLine(const std::string& line) {
    return WaitFor([&] { return metrics_.Render().find(line + "\n") != std::string::npos; }, absl::Seconds(5));
  }

  // The decode address each Prefill call was told to push to.
  static std::vector<std::string> PushedTo(FakeWorker& prefill) {
    std::vector<std::string> out;
    for (const std::string& s : prefill.script.seen()) out.push_back(s.substr(s.find(" -> ") + 4));
    return out;
  }

  MetricsRegistry metrics_;  // before router_: outlives it
  bool log_requests_ = false;  // the access log on stderr (StartStack)
  Board board_;
  std::vector<std::unique_ptr<FakeWorker>> prefill_, decode_;
  std::vector<std::string> prefill_addresses_, decode_addresses_;
  std::unique_ptr<WorkerPool> prefill_pool_, decode_pool_;
  std::unique_ptr<RouterService> router_;
  std::unique_ptr<grpc::Server> router_server_;
  std::unique_ptr<pdserve::v1::Generator::Stub> stub_;
};

TEST_F(RouterServiceTest, PlacesOnBothWorkersAndStreamsTheTokens) {
  StartStack(1, 1);
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{kH, kI, kJ}));
  EXPECT_EQ(r.text, "hij");
  ASSERT_FALSE(r.messages.empty());
  const pdserve::v1::GenerateResponse& last = r.messages.back();
  EXPECT_EQ(last.finish_reason(), pdserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.request_id(), "client-1");
  EXPECT_EQ(last.usage().prompt_tokens(), 4u);
  EXPECT_EQ(last.usage().generated_tokens(), 3u);
  EXPECT_EQ(last.usage().prefill_worker(), prefill_addresses_[0]);
  EXPECT_EQ(last.usage().decode_worker(), decode_addresses_[0]);
  // One hand-off: the prefill worker pushed the decode worker's request.
  ASSERT_EQ(decode_[0]->script.calls(), 1);
  ASSERT_EQ(prefill_[0]->script.calls(), 1);
  const std::string rid = decode_[0]->script.seen()[0];
  EXPECT_NE(rid, "client-1");  // internal ids are the router's own
  EXPECT_EQ(prefill_[0]->script.seen()[0], absl::StrCat(rid, " -> ", decode_addresses_[0]));
}

TEST_F(RouterServiceTest, InvalidRequestReachesNoWorker) {
  StartStack(1, 1);
  pdserve::v1::GenerateRequest req = Request();
  req.add_token_ids(999);  // past the vocabulary
  grpc::ClientContext ctx;
  Result r = GenerateWith(&ctx, req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << r.status.error_message();
  EXPECT_EQ(decode_[0]->script.calls() + prefill_[0]->script.calls(), 0);
  // The refused field travels as data, in the pdserve-param trailer (the
  // HTTP front's error `param`), not only in the message's words.
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto it = trailers.find("pdserve-param");
  ASSERT_NE(it, trailers.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()).rfind("token_ids", 0), 0u);
}

TEST_F(RouterServiceTest, AnAcceptedRequestHasNoParamTrailer) {
  StartStack(1, 1);
  grpc::ClientContext ctx;
  Result r = GenerateWith(&ctx);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(ctx.GetServerTrailingMetadata().count("pdserve-param"), 0u);
}

TEST_F(RouterServiceTest, ApiKeyIsRequiredOnGenerateAndTokenize) {
  RouterOptions o;
  o.api_key = "k-123";
  StartStack(1, 1, o);
  auto with_key = [](const std::string& value) {
    return [value](grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", value); };
  };
  for (const char* bad : {"", "Bearer", "Bearer k-12", "Bearer k-1234", "Basic k-123", "k-123"}) {
    Result r = bad[0] == '\0' ? Generate() : Generate(with_key(bad));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_EQ(r.status.error_message().find("k-123"), std::string::npos) << r.status.error_message();
  }
  EXPECT_EQ(decode_[0]->script.calls() + prefill_[0]->script.calls(), 0);  // refused before any worker
  Result r = Generate(with_key("Bearer k-123"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "hij");

  pdserve::v1::TokenizeRequest treq;
  treq.set_text("ab");
  pdserve::v1::TokenizeResponse tresp;
  grpc::ClientContext no_key;
  EXPECT_EQ(stub_->Tokenize(&no_key, treq, &tresp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext keyed;
  keyed.AddMetadata("authorization", "Bearer k-123");
  ASSERT_TRUE(stub_->Tokenize(&keyed, treq, &tresp).ok());
  EXPECT_EQ(tresp.token_ids_size(), 2);
  EXPECT_EQ(tresp.max_context(), 4096u) << "Tokenize reports the model's max_context";
}

TEST_F(RouterServiceTest, DecodeUnavailableRetriesOnAnotherDecodeWorker) {
  StartStack(1, 2);
  decode_[0]->script.Then(Fail(grpc::StatusCode::UNAVAILABLE));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(decode_[0]->script.calls(), 1);
  EXPECT_EQ(decode_[1]->script.calls(), 1);
  EXPECT_EQ(PushedTo(*prefill_[0]), std::vector<std::string>{decode_addresses_[1]});
  EXPECT_EQ(r.messages.back().usage().decode_worker(), decode_addresses_[1]);
}

// No healthy prefill worker once the decode worker has admitted: the
// attempt ends without a prefill call, and the client gets UNAVAILABLE at
// once (not a wait until its deadline) and none of the tokens a
// misbehaving decode worker streams without a hand-off. (The router also
// counts the prefill as failed there, so that such a token could never be
// held for a prefill answer that will not come; gRPC's cancel before the
// next read already keeps it from arriving in these runs.)
TEST_F(RouterServiceTest, NoPrefillWorkerAfterAdmissionEndsTheAttempt) {
  StartStack(1, 1);
  prefill_[0]->server->Shutdown(std::chrono::system_clock::now());
  ASSERT_TRUE(WaitFor([&] { return prefill_pool_->Candidates({}).empty(); }));
  for (int i = 0; i < 10; ++i) {
    decode_[0]->script.Then(StreamAtOnce());
    Result r = Generate([](grpc::ClientContext* ctx) {
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    });
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << "round " << i << ": " << r.status.error_message();
    EXPECT_TRUE(r.tokens.empty()) << "round " << i;
  }
  EXPECT_EQ(prefill_[0]->script.calls(), 0);
}

// The prefill worker says the hand-off's decode side failed: the next
// attempt avoids that decode worker and may use the same prefill worker.
TEST_F(RouterServiceTest, FailureMarkedDecodeSideExcludesTheDecodeWorker) {
  StartStack(2, 2);
  prefill_[0]->script.Then(Fail(grpc::StatusCode::UNAVAILABLE, "decode"));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(decode_[0]->script.calls(), 1);
  EXPECT_EQ(decode_[1]->script.calls(), 1);
  EXPECT_EQ(PushedTo(*prefill_[0]), (std::vector<std::string>{decode_addresses_[0], decode_addresses_[1]}));
  EXPECT_EQ(prefill_[1]->script.calls(), 0);
  // The abandoned reservation on the first decode worker was cancelled.
  EXPECT_TRUE(WaitFor([&] { return decode_[0]->script.cancelled() == 1; }));
}

// The decode worker rejected the hand-off as damaged (a checksum, order or
// size check): damage in transit implicates neither worker, so the retry
// may use the same pair, here the only one.
TEST_F(RouterServiceTest, DamagedHandoffIsRetriedOnTheSamePair) {
  StartStack(1, 1);
  prefill_[0]->script.Then(Fail(grpc::StatusCode::FAILED_PRECONDITION, "decode"));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{kH, kI, kJ}));
  EXPECT_EQ(PushedTo(*prefill_[0]), (std::vector<std::string>{decode_addresses_[0], decode_addresses_[0]}));
  EXPECT_EQ(decode_[0]->script.calls(), 2);
}

// A second damaged hand-off in one placement excludes the decode worker
// (no loop on one pair): with no other, the client gets a rejection (the
// first of the two, as informative as the second).
TEST_F(RouterServiceTest, SecondDamagedHandoffExcludesTheDecodeWorker) {
  StartStack(1, 1);
  prefill_[0]->script.Then(Fail(grpc::StatusCode::DATA_LOSS, "decode"));
  prefill_[0]->script.Then(Fail(grpc::StatusCode::FAILED_PRECONDITION, "decode"));
  Result r = Generate();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DATA_LOSS) << r.status.error_message();
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(prefill_[0]->script.calls(), 2);
  EXPECT_EQ(decode_[0]->script.calls(), 2);
}

// The failure is the prefill worker's own: the next attempt keeps the
// decode worker and avoids that prefill worker.
TEST_F(RouterServiceTest, FailureMarkedPrefillSideExcludesThePrefillWorker) {
  StartStack(2, 2);
  prefill_[0]->script.Then(Fail(grpc::StatusCode::UNAVAILABLE, "prefill"));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(prefill_[0]->script.calls(), 1);
  EXPECT_EQ(PushedTo(*prefill_[1]), std::vector<std::string>{decode_addresses_[0]});
  EXPECT_EQ(decode_[0]->script.calls(), 2);
  EXPECT_EQ(decode_[1]->script.calls(), 0);
  EXPECT_EQ(r.messages.back().usage().prefill_worker(), prefill_addresses_[1]);
}

// The decode worker's hand-off timeout: the next attempt keeps the decode
// worker and avoids the prefill worker. A hand-off that stalled marks that
// worker unhealthy; one that never began (the prompt may only have waited
// in its queue) does not.
TEST_F(RouterServiceTest, HandoffThatNeverBeganAvoidsThePrefillWorkerWithoutMarkingIt) {
  StartStack(2, 1);
  for (const bool not_begun : {true, false}) {
    SCOPED_TRACE(not_begun ? "never began" : "stalled");
    const auto failures = [&] {
      for (const WorkerInfo& w : prefill_pool_->Snapshot()) {
        if (w.address == prefill_addresses_[0]) return w.failures_reported;
      }
      return int64_t{-1};
    };
    const int64_t before = failures();
    const int calls0 = prefill_[0]->script.calls(), calls1 = prefill_[1]->script.calls();
    ASSERT_TRUE(WaitFor([&] { return prefill_pool_->Candidates({}).front() == prefill_addresses_[0]; }));
    prefill_[0]->script.Then(Hang());
    decode_[0]->script.Then(HandoffTimedOut(not_begun));
    Result r = Generate();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(prefill_[0]->script.calls(), calls0 + 1);
    EXPECT_EQ(prefill_[1]->script.calls(), calls1 + 1);
    EXPECT_EQ(r.messages.back().usage().prefill_worker(), prefill_addresses_[1]);
    EXPECT_EQ(failures(), before + (not_begun ? 0 : 1));
  }
}

// The prefill worker's call fails after its hand-off reached the decode
// worker, which has streamed: the K/V is there, so the stream goes on.
TEST_F(RouterServiceTest, PrefillFailingAfterTheFirstTokenKeepsTheStream) {
  StartStack(2, 1);
  prefill_[0]->script.Then(PushThenFail(grpc::StatusCode::UNAVAILABLE, /*after_stream=*/true));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{kH, kI, kJ}));
  EXPECT_EQ(decode_[0]->script.calls(), 1);
  EXPECT_EQ(decode_[0]->script.cancelled(), 0);
  EXPECT_EQ(prefill_[1]->script.calls(), 0);
  EXPECT_EQ(r.messages.back().usage().prefill_worker(), prefill_addresses_[0]);
}

// The same failure racing the first token: whichever comes first, the
// client sees either the whole answer from this attempt or, the token
// dropped unseen, the whole answer from a retry; never tokens then an error.
TEST_F(RouterServiceTest, PrefillFailingAsTheFirstTokenComesNeverCutsTheStream) {
  StartStack(2, 1);
  for (int i = 0; i < 20; ++i) {
    // RESOURCE_EXHAUSTED: retried, and the worker stays in the pool.
    prefill_[0]->script.Then(PushThenFail(grpc::StatusCode::RESOURCE_EXHAUSTED, /*after_stream=*/false));
    Result r = Generate();
    ASSERT_TRUE(r.status.ok()) << "round " << i << ": " << r.status.error_message();
    EXPECT_EQ(r.tokens, (std::vector<uint32_t>{kH, kI, kJ})) << "round " << i;
  }
  EXPECT_EQ(prefill_[0]->script.calls(), 20);
}

// Every decode worker full: the request waits for room instead of failing,
// and is placed once a worker has some.
TEST_F(RouterServiceTest, EveryWorkerFullWaitsForRoom) {
  StartStack(1, 2);
  for (int i = 0; i < 3; ++i) {
    decode_[0]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
    decode_[1]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  }
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_GE(decode_[0]->script.calls() + decode_[1]->script.calls(), 7);
}

// Full for longer than the client waits: the deadline ends it, saying
// that every worker was full.
TEST_F(RouterServiceTest, EveryWorkerFullUntilTheDeadline) {
  StartStack(1, 2);
  decode_[0]->script.SetDefault(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  decode_[1]->script.SetDefault(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  Result r = Generate([](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(800));
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  EXPECT_GE(decode_[0]->script.calls(), 2);  // tried again while waiting
  EXPECT_EQ(prefill_[0]->script.calls(), 0);
}

// A decode worker whose whole KV budget is too small (OUT_OF_RANGE at
// admission) is passed over for one with a larger budget, and never asked
// again, in this round or a later one (here the other worker is full
// twice first).
TEST_F(RouterServiceTest, DecodeWorkerTooSmallForTheRequestIsNotRetried) {
  StartStack(1, 2);
  decode_[0]->script.SetDefault(Fail(grpc::StatusCode::OUT_OF_RANGE));
  decode_[1]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  decode_[1]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(decode_[0]->script.calls(), 1);
  EXPECT_EQ(decode_[1]->script.calls(), 3);
  EXPECT_EQ(PushedTo(*prefill_[0]), std::vector<std::string>{decode_addresses_[1]});
}

// No decode worker's whole budget holds the request: RESOURCE_EXHAUSTED at
// once (not a wait for room that never comes), naming --kv-budget-mb, with
// the reason trailer the OpenAI front maps to 400; nothing was prefilled.
TEST_F(RouterServiceTest, RequestNoDecodeBudgetHoldsIsResourceExhaustedBeforeAnyPrefill) {
  StartStack(1, 2);
  decode_[0]->script.SetDefault(Fail(grpc::StatusCode::OUT_OF_RANGE));
  decode_[1]->script.SetDefault(Fail(grpc::StatusCode::OUT_OF_RANGE));
  grpc::ClientContext ctx;
  Result r = GenerateWith(&ctx);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("--kv-budget-mb"), std::string::npos) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("scripted OUT_OF_RANGE"), std::string::npos) << r.status.error_message();
  const auto& md = ctx.GetServerTrailingMetadata();
  const auto reason = md.find("pdserve-reason");
  ASSERT_NE(reason, md.end());
  EXPECT_EQ(std::string(reason->second.data(), reason->second.size()), "kv_budget_exceeded");
  EXPECT_EQ(decode_[0]->script.calls(), 1);
  EXPECT_EQ(decode_[1]->script.calls(), 1);
  EXPECT_EQ(prefill_[0]->script.calls(), 0);
}

// The deadline passes while a later round's attempt is under way (here
// the worker never answers), not in the queue: the request line still
// names the capacity it waited for.
TEST_F(RouterServiceTest, DeadlineDuringARetryAfterEveryWorkerWasFullNamesTheCapacity) {
  RouterOptions o;
  o.metrics = &metrics_;
  log_requests_ = true;
  StartStack(1, 2, o);
  decode_[0]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  decode_[1]->script.Then(Fail(grpc::StatusCode::RESOURCE_EXHAUSTED));
  decode_[0]->script.SetDefault(Hang());
  decode_[1]->script.SetDefault(Hang());
  testing::internal::CaptureStderr();
  Result r = Generate([](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(800));
  });
  const bool logged = MetricsShowLine("pdserve_router_requests_total{code=\"DEADLINE_EXCEEDED\"} 1");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  ASSERT_TRUE(logged) << metrics_.Render();
  EXPECT_EQ(decode_[0]->script.calls() + decode_[1]->script.calls(), 3) << "two full, then one that hangs";
  EXPECT_NE(log.find("every worker was full, last: "), std::string::npos) << log;
}

// A full queue refuses at once (RESOURCE_EXHAUSTED); the request that did
// wait is served once the slot frees.
TEST_F(RouterServiceTest, FullQueueIsResourceExhausted) {
  RouterOptions o;
  o.queue.max_active = 1;
  o.queue.max_waiting = 1;
  o.metrics = &metrics_;
  StartStack(1, 1, o);
  decode_[0]->script.Then(Hang());
  BackgroundCall a(this);
  EXPECT_TRUE(WaitFor([&] { return decode_[0]->script.calls() == 1; }));
  BackgroundCall b(this);
  // b waits in the queue (one place; the router's gauge says when): a third
  // request is refused.
  EXPECT_TRUE(MetricsShowLine("pdserve_router_requests_waiting 1")) << metrics_.Render();
  Result third = Generate();
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.status.error_message();
  EXPECT_EQ(decode_[0]->script.calls(), 1);  // b has not been placed
  EXPECT_TRUE(a.Cancel()) << "the first call ended before the cancel";
  const Result first = a.Join();
  const Result second = b.Join();
  EXPECT_EQ(first.status.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.tokens.size(), 3u);
}

// The client cancels while the decode worker streams nothing yet: the
// cancellation reaches the decode worker's call.
TEST_F(RouterServiceTest, ClientCancelReachesTheDecodeWorker) {
  StartStack(1, 1);
  decode_[0]->script.Then(Hang());
  BackgroundCall call(this);
  // Both the call and the worker call exist before the cancel.
  EXPECT_TRUE(WaitFor([&] { return call.Running() && prefill_[0]->script.calls() == 1; }));
  EXPECT_TRUE(call.Cancel()) << "the call ended before the cancel";
  const Result r = call.Join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return decode_[0]->script.cancelled() == 1; }));
}

// Cancelled during the prefill: the prefill worker's call and the decode
// worker's reservation are both cancelled.
TEST_F(RouterServiceTest, ClientCancelReachesThePrefillWorker) {
  StartStack(1, 1);
  prefill_[0]->script.Then(Hang());
  BackgroundCall call(this);
  // Both the call and the worker call exist before the cancel.
  EXPECT_TRUE(WaitFor([&] { return call.Running() && prefill_[0]->script.calls() == 1; }));
  EXPECT_TRUE(call.Cancel()) << "the call ended before the cancel";
  const Result r = call.Join();
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return prefill_[0]->script.cancelled() == 1; }));
  EXPECT_TRUE(WaitFor([&] { return decode_[0]->script.cancelled() == 1; }));
  EXPECT_EQ(decode_[0]->script.calls(), 1);  // not retried
}

// The deadline passes while the decode worker is silent:
// DEADLINE_EXCEEDED, and the workers' calls end too.
TEST_F(RouterServiceTest, DeadlineIsDeadlineExceededAndReachesTheWorkers) {
  StartStack(1, 1);
  decode_[0]->script.Then(Hang());
  const absl::Time start = absl::Now();
  Result r = Generate([](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WaitFor([&] { return decode_[0]->script.cancelled() == 1; }));
  EXPECT_EQ(decode_[0]->script.calls(), 1);
}

// A stop string ends the request at the router: the text stops before it,
// the finish reason is STOP, and the call still ends OK.
TEST_F(RouterServiceTest, StopStringEndsTheRequest) {
  StartStack(1, 1);
  pdserve::v1::GenerateRequest req = Request();
  req.mutable_sampling()->add_stop("i");
  Result r = Generate(nullptr, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "h");
  ASSERT_FALSE(r.messages.empty());
  EXPECT_EQ(r.messages.back().finish_reason(), pdserve::v1::FINISH_REASON_STOP);
}

// The first token comes before the prefill's answer (the router holds it
// until then) and holds the stop string: relaying it cancels the Decode
// call from outside its stream's callbacks, and the read that follows
// must still find the stream open (it once found it freed: UBSan's
// "invalid vptr" in ClientCallbackReader, under asan_test).
TEST_F(RouterServiceTest, StopStringInTheHeldFirstTokenEndsTheRequest) {
  StartStack(1, 1);
  for (int i = 0; i < 20; ++i) {
    prefill_[0]->script.Then(ServeAfterStream());
    pdserve::v1::GenerateRequest req = Request();
    req.mutable_sampling()->add_stop("i");
    Result r = Generate(nullptr, req);
    ASSERT_TRUE(r.status.ok()) << "round " << i << ": " << r.status.error_message();
    EXPECT_EQ(r.text, "h") << "round " << i;
    ASSERT_FALSE(r.messages.empty());
    EXPECT_EQ(r.messages.back().finish_reason(), pdserve::v1::FINISH_REASON_STOP) << "round " << i;
    EXPECT_EQ(r.messages.back().usage().prefill_worker(), prefill_addresses_[0]) << "round " << i;
  }
}

// A prompt within local_prefill_max_tokens skips the prefill worker: the
// decode worker is both workers of the request.
TEST_F(RouterServiceTest, ShortPromptIsPrefilledOnTheDecodeWorker) {
  RouterOptions o;
  o.local_prefill_max_tokens = 16;
  StartStack(1, 1, o);
  Result r = Generate();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{kH, kI, kJ}));
  EXPECT_EQ(prefill_[0]->script.calls(), 0);
  EXPECT_EQ(r.messages.back().usage().prefill_worker(), decode_addresses_[0]);
  EXPECT_EQ(r.messages.back().usage().decode_worker(), decode_addresses_[0]);
}

// The router's series: completions by finish reason, one inter-token gap per
// token after the first, the admission queue's waiting gauge. The request
// is counted after its stream ends, so the test polls.
TEST_F(RouterServiceTest, MetricsCountFinishReasonsAndTokenGaps) {
  RouterOptions o;
  o.metrics = &metrics_;
  StartStack(1, 1, o);
  EXPECT_TRUE(MetricsShowLine("pdserve_router_completions_total{finish_reason=\"length\"} 0"));
  EXPECT_TRUE(MetricsShowLine("pdserve_router_requests_waiting 0"));
  ASSERT_TRUE(Generate().status.ok());  // 3 tokens, LENGTH
  pdserve::v1::GenerateRequest stop = Request();
  stop.mutable_sampling()->add_stop("j");  // 2 tokens streamed, STOP
  ASSERT_TRUE(Generate(nullptr, stop).status.ok());
  EXPECT_TRUE(MetricsShowLine("pdserve_router_completions_total{finish_reason=\"length\"} 1")) << metrics_.Render();
  EXPECT_TRUE(MetricsShowLine("pdserve_router_completions_total{finish_reason=\"stop\"} 1")) << metrics_.Render();
  EXPECT_TRUE(MetricsShowLine("pdserve_router_completions_total{finish_reason=\"abort\"} 0")) << metrics_.Render();
  // (3 - 1) + (3 - 1) gaps: the stop string matched on the last token,
  // which is relayed (its text is not).
  const std::string body = metrics_.Render();
  const std::string count = "pdserve_router_itl_seconds_count ";
  const size_t at = body.find(count);
  ASSERT_NE(at, std::string::npos) << body;
  EXPECT_EQ(std::stoi(body.substr(at + count.size())), 4) << body;
}

}  // namespace
}  // namespace pdserve
