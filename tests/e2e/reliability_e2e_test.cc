// Regression tests of the defects an outside reliability test found (issue
// 12), each on real pdserve-router, pdserve-prefill and pdserve-decode
// processes on loopback:
//   a decode worker restarted between admission and hand-off;
//   a deadline counted as a cancel;
//   a hand-off rejection counted twice;
//   every decode worker full (the KV budget must be the reason given);
//   a Decode with a live id cancelling the other request;
//   an abandoned hand-off keeping its K/V in memory;
//   internal RPCs trusting any caller;
//   client text forging access-log lines; negative temperature;
//   a prefill longer than the hand-off timeout;
//   a burst larger than every queue; a per-client cap.
//
// The stack: router R -> prefill P and decode D1, D2 (restartable on their
// ports); router Rc -> the same, with --max-inflight-per-client 2;
// decode Dt with a 1 s hand-off timeout, prefill Pt heartbeating every
// 200 ms to it, router Rt -> Pt, Dt (max_new_tokens up to 20000).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/engine/engine.h"
#include "common/handoff/kv_wire.h"
#include "common/model/cache_layout.h"
#include "common/model/checkpoint.h"
#include "tests/e2e/e2e_model.h"
#include "tests/e2e/process_util.h"
#include "tests/e2e/serving_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using ::pdserve::testing::Bin;
using ::pdserve::testing::ChildProcess;
using ::pdserve::testing::DecodeLoad;
using ::pdserve::testing::E2eConfig;
using ::pdserve::testing::Generate;
using ::pdserve::testing::GenerateResult;
using ::pdserve::testing::IdsRequest;
using ::pdserve::testing::MetricValue;
using ::pdserve::testing::PrefillLoad;
using ::pdserve::testing::Prompt;
using ::pdserve::testing::WaitUntil;

// Resident set of a process, from /proc.
int64_t RssBytes(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

struct Stack {
  ::pdserve::testing::TempDir dir;
  std::string model;
  std::map<std::string, std::unique_ptr<ChildProcess>> procs;
  std::map<std::string, std::vector<std::string>> argv;
  std::map<std::string, std::string> addr;
  std::map<std::string, int> metrics_port;
  std::unique_ptr<Engine> ref;

  void Start(const std::string& name) {
    auto p = std::make_unique<ChildProcess>();
    std::vector<std::string> args = argv[name];
    // Against an older build (PDSERVE_E2E_BINARY_DIR), flags it lacks are
    // ignored with PDSERVE_E2E_UNDEFOK=flag,flag (so the new flags are
    // written --name=value).
    if (const char* undefok = std::getenv("PDSERVE_E2E_UNDEFOK")) args.push_back(absl::StrCat("--undefok=", undefok));
    p->Start(args, dir.Sub(name + ".log"));
    procs[name] = std::move(p);
  }
  void Await(const std::string& name) {
    const int port = procs[name]->WaitForPort();
    ASSERT_GT(port, 0) << name << " did not start:\n" << procs[name]->Log();
    addr[name] = absl::StrCat("127.0.0.1:", port);
    metrics_port[name] = procs[name]->WaitForPort(std::chrono::seconds(10), "metrics on port ([0-9]+)");
  }
  void Worker(const std::string& name, const std::string& kind, std::vector<std::string> extra = {}) {
    argv[name] = {Bin(kind == "decode" ? "decode_service/pdserve-decode" : "prefill_service/pdserve-prefill"),
                  "--model", model, "--listen", "127.0.0.1:0", "--threads", "1", "--prefill-chunk", "4",
                  "--metrics-port", "0"};
    argv[name].insert(argv[name].end(), extra.begin(), extra.end());
    Start(name);
  }
  void Router(const std::string& name, const std::string& prefill, const std::string& decode,
              std::vector<std::string> extra = {}) {
    argv[name] = {Bin("router/pdserve-router"), "--model", model, "--listen", "127.0.0.1:0", "--prefill", prefill,
                  "--decode", decode, "--poll-interval-ms", "100", "--max-new-tokens-cap", "4000",
                  "--metrics-port", "0", "--http-listen", "127.0.0.1:0"};
    argv[name].insert(argv[name].end(), extra.begin(), extra.end());
    Start(name);
  }
  // kill -9, then the same command on the same port.
  void Restart(const std::string& name) {
    procs[name]->Stop(SIGKILL);
    for (auto& a : argv[name]) {
      if (a == "127.0.0.1:0") a = addr[name];
    }
    Start(name);
    Await(name);
  }
  void Signal(const std::string& name, int sig) { kill(procs[name]->pid(), sig); }
  // The /metrics body; retried while a scrape fails (empty body).
  std::string Metrics(const std::string& name) {
    std::string body;
    WaitUntil([&] { return !(body = ::pdserve::testing::HttpGetMetrics(metrics_port[name])).empty(); },
              std::chrono::seconds(60));
    return body;
  }
};

Stack* g = nullptr;

class ReliabilityE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g = new Stack();
    g->model = g->dir.Sub("model");
    ASSERT_TRUE(SaveCheckpoint(RandomWeights(E2eConfig(), 1), g->model, StDtype::kF32).ok());
    g->Worker("D1", "decode", {"--kv-budget-mb", "8"});
    g->Worker("D2", "decode", {"--kv-budget-mb", "8"});
    g->Worker("Dt", "decode", {"--handoff-timeout-s", "1"});
    for (const char* d : {"D1", "D2", "Dt"}) g->Await(d);
    g->Worker("P", "prefill", {"--decode-allowlist=" + g->addr["D1"] + "," + g->addr["D2"]});
    g->Worker("Pt", "prefill", {"--handoff-heartbeat-ms=200"});
    for (const char* p : {"P", "Pt"}) g->Await(p);
    const std::string d12 = g->addr["D1"] + "," + g->addr["D2"];
    g->Router("R", g->addr["P"], d12, {"--max-attempts", "4"});
    g->Router("Rc", g->addr["P"], d12, {"--max-inflight-per-client=2"});
    g->Router("Rt", g->addr["Pt"], g->addr["Dt"], {"--max-new-tokens-cap", "20000"});
    for (const char* r : {"R", "Rc", "Rt"}) g->Await(r);
    EngineOptions eo;
    eo.num_threads = 1;
    eo.prefill_chunk = 4;
    auto e = Engine::Load(g->model, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    g->ref = std::move(*e);
  }
  static void TearDownTestSuite() {
    delete g;
    g = nullptr;
  }

  static std::string Addr(const std::string& n) { return g->addr[n]; }

  static std::vector<int64_t> Reference(const pdserve::v1::GenerateRequest& req) {
    GenerateRequest r;
    r.prompt.assign(req.token_ids().begin(), req.token_ids().end());
    r.max_new_tokens = req.sampling().max_new_tokens();
    r.sampling.temperature = req.sampling().temperature();
    r.stop_at_eos = !req.sampling().ignore_eos();
    auto out = g->ref->Generate(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<int64_t>{};
  }

  static bool AllFree() {
    for (const char* d : {"D1", "D2"}) {
      auto l = DecodeLoad(Addr(d));
      if (l.kv_bytes_used() != 0 || l.active_sequences() != 0 || l.kv_bytes_allocated() != 0) return false;
    }
    auto p = PrefillLoad(Addr("P"));
    return p.active_sequences() == 0 && p.queued_requests() == 0;
  }
};

// A Decode reservation made directly, as the router makes it.
class Reservation {
 public:
  Reservation(const std::string& decode, const std::string& id, int64_t prompt_len, bool expect_admitted = true)
      : stub_(internal::v1::DecodeWorker::NewStub(MakeChannel(decode))) {
    internal::v1::DecodeRequest r;
    r.set_request_id(id);
    r.set_prompt_len(prompt_len);
    r.set_max_new_tokens(5);
    reader_ = stub_->Decode(&ctx_, r);
    internal::v1::DecodeResponse m;
    admitted_ = reader_->Read(&m) && m.admitted();
    EXPECT_EQ(admitted_, expect_admitted);
  }
  ~Reservation() {
    ctx_.TryCancel();
    Status();
  }
  grpc::Status Status() {
    if (!finished_) {
      internal::v1::DecodeResponse m;
      while (reader_->Read(&m)) {
      }
      status_ = reader_->Finish();
      finished_ = true;
    }
    return status_;
  }
  void Cancel() { ctx_.TryCancel(); }

 private:
  std::unique_ptr<internal::v1::DecodeWorker::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<internal::v1::DecodeResponse>> reader_;
  bool admitted_ = false, finished_ = false;
  grpc::Status status_;
};

// Header and every layer of a valid hand-off (no commit).
std::vector<internal::v1::KvChunk> HandoffChunks(const std::string& id, const std::string& fingerprint,
                                                 int64_t prompt_len) {
  const ModelConfig c = E2eConfig();
  internal::v1::KvHeader h;
  h.set_request_id(id);
  h.set_model_fingerprint(fingerprint);
  h.set_dtype(internal::v1::KV_DTYPE_F32);
  h.set_prompt_len(prompt_len);
  h.mutable_sampling()->set_max_new_tokens(5);
  KvChunkEncoder enc(c, h, int64_t{1} << 20);
  std::vector<internal::v1::KvChunk> out = {enc.Header()};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t rows = HandoffRows(c, l, prompt_len);
    auto layer = enc.Layer(l, at::randn({rows, c.n_kv_heads, c.head_dim}), at::randn({rows, c.n_kv_heads, c.head_dim}));
    EXPECT_TRUE(layer.ok());
    out.insert(out.end(), layer->begin(), layer->end());
  }
  return out;
}

// Defect 1. P is stalled while it holds the request, the decode worker that
// admitted it is killed and restarted on its port, then P resumes. The
// router must see a decode-side failure and place the request again.
TEST_F(ReliabilityE2eTest, DecodeRestartedDuringPrefillIsRetriedElsewhere) {
  g->Signal("P", SIGSTOP);
  auto req = IdsRequest(Prompt(30, 1), 6);
  req.mutable_sampling()->set_ignore_eos(true);
  GenerateResult got;
  std::thread client([&] { got = Generate(Addr("R"), req, std::chrono::seconds(60)); });
  std::string admitted_on;
  ASSERT_TRUE(WaitUntil([&] {
    for (const char* d : {"D1", "D2"}) {
      if (DecodeLoad(Addr(d)).active_sequences() > 0) admitted_on = d;
    }
    return !admitted_on.empty();
  }, std::chrono::seconds(10)));
  g->Restart(admitted_on);
  g->Signal("P", SIGCONT);
  client.join();
  ASSERT_TRUE(got.status.ok()) << got.status.error_code() << " " << got.status.error_message() << "\n" << g->procs["R"]->Log();
  EXPECT_EQ(got.ids, Reference(req));
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 2: the router's metrics and log say DEADLINE_EXCEEDED, not CANCELLED.
TEST_F(ReliabilityE2eTest, DeadlineIsCountedAsDeadlineExceeded) {
  const std::string dl = "pdserve_router_requests_total{code=\"DEADLINE_EXCEEDED\"}";
  const std::string cancelled = "pdserve_router_requests_total{code=\"CANCELLED\"}";
  const double dl0 = MetricValue(g->Metrics("R"), dl), c0 = MetricValue(g->Metrics("R"), cancelled);
  g->Signal("P", SIGSTOP);
  GenerateResult got = Generate(Addr("R"), IdsRequest(Prompt(20, 2), 4), std::chrono::seconds(1));
  g->Signal("P", SIGCONT);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << got.status.error_message();
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(g->Metrics("R"), dl) == dl0 + 1; }, std::chrono::seconds(60)))
      << g->Metrics("R");
  EXPECT_EQ(MetricValue(g->Metrics("R"), cancelled), c0);
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 3: a hand-off stream that ends without its commit is one rejection.
TEST_F(ReliabilityE2eTest, HandoffRejectedAtItsEndIsCountedOnce) {
  const std::string series = "pdserve_kv_handoff_rejections_total";
  const double r0 = MetricValue(g->Metrics("D1"), series);
  Reservation res(Addr("D1"), "once", 6);
  auto stub = internal::v1::DecodeWorker::NewStub(MakeChannel(Addr("D1")));
  grpc::ClientContext ctx;
  internal::v1::PushKvResponse resp;
  auto writer = stub->PushKv(&ctx, &resp);
  const std::string fp = DecodeLoad(Addr("D1")).model_fingerprint();
  auto chunks = HandoffChunks("once", fp, 6);
  for (const auto& c : chunks) ASSERT_TRUE(writer->Write(c));
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(res.Status().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(g->Metrics("D1"), series) == r0 + 1; }, std::chrono::seconds(60)));
  // Once the decode worker holds nothing of it (reservation and hand-off gone)
  // nothing is left to count it again: the count is final.
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
  EXPECT_EQ(MetricValue(g->Metrics("D1"), series), r0 + 1) << "one rejected hand-off counted more than once";
}

// Defect 4: with both decode workers full the request waits for room; when
// its deadline passes the reason given is the KV budget, not "no other
// healthy decode worker".
TEST_F(ReliabilityE2eTest, AllDecodeWorkersFullWaitsAndNamesTheKvBudget) {
  const ModelConfig c = E2eConfig();
  // What an earlier test left on the decode workers (a cancelled stream's
  // reservation, released asynchronously) would be counted as used when the
  // fill is sized, and freed under it later: room the request could take.
  ASSERT_TRUE(WaitUntil(AllFree, std::chrono::seconds(30)));
  std::vector<std::unique_ptr<Reservation>> fill;
  for (const char* d : {"D1", "D2"}) {
    const int64_t free = DecodeLoad(Addr(d)).kv_bytes_free();
    int64_t t = 8;
    while (MixedKVCache::BytesFor(CacheLayout(c), KvDtype::kF32, t + 1) <= free) ++t;
    fill.push_back(std::make_unique<Reservation>(Addr(d), absl::StrCat("fill-", d), t - 5));
  }
  // Full for the request below (a 200-token prompt and 100 new tokens).
  for (const char* d : {"D1", "D2"}) {
    ASSERT_LT(DecodeLoad(Addr(d)).kv_bytes_free(), MixedKVCache::BytesFor(CacheLayout(c), KvDtype::kF32, 300)) << d;
  }
  // The deadline must outlast the 200-token prefill and a placement on each
  // decode worker, so that both have said "full" before it passes: 2 s was
  // too short under AddressSanitizer right after the 1,000-request burst.
  GenerateResult got = Generate(Addr("R"), IdsRequest(Prompt(200, 3), 100), std::chrono::seconds(8));
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << got.status.error_message();
  EXPECT_TRUE(WaitUntil([&] { return g->procs["R"]->Log().find("KV budget full") != std::string::npos; },
                        std::chrono::seconds(20)))
      << g->procs["R"]->Log();
  // Room again: a waiting request is served once a reservation goes.
  GenerateResult later;
  auto req = IdsRequest(Prompt(200, 4), 20);
  req.mutable_sampling()->set_ignore_eos(true);
  const double requeued0 = MetricValue(g->Metrics("R"), "pdserve_router_requeued_total");
  std::thread client([&] { later = Generate(Addr("R"), req, std::chrono::seconds(120)); });
  // The request must be waiting for room (it found every decode worker full
  // and went back to the router's queue) before the room is made: otherwise
  // this would test nothing.
  const bool queued = WaitUntil(
      [&] {
        const std::string m = g->Metrics("R");
        return MetricValue(m, "pdserve_router_requeued_total") > requeued0 &&
               MetricValue(m, "pdserve_router_queued_requests") >= 1;
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(queued) << "the request never waited in the router's queue for a full decode worker (60 s):\n"
                      << g->Metrics("R");
  fill.clear();
  client.join();
  ASSERT_TRUE(later.status.ok()) << later.status.error_message();
  EXPECT_EQ(later.ids, Reference(req));
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 5: a second Decode with a live id is refused and leaves the first
// request alone; a stream cancels only its own admission.
TEST_F(ReliabilityE2eTest, DuplicateDecodeIdDoesNotCancelTheLiveRequest) {
  auto first = std::make_unique<Reservation>(Addr("D2"), "dup", 6);
  {
    Reservation second(Addr("D2"), "dup", 6, /*expect_admitted=*/false);
    EXPECT_EQ(second.Status().error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(DecodeLoad(Addr("D2")).active_sequences(), 1u) << "the refused duplicate cancelled the live request";
  first.reset();
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 6: a hand-off that never commits frees its K/V when its request
// ends (cancelled here), although the sender keeps the stream open: 16
// such pushes to Dt, all left open, must not hold 16 hand-offs of memory
// (the allocator keeps some freed memory, so the bound is half of that),
// and the decode worker's metrics count the bytes while they are held.
TEST_F(ReliabilityE2eTest, AbandonedHandoffsFreeTheirMemory) {
  constexpr int kPushes = 16;
  const int64_t prompt = 30000;  // ~15 MB of f32 K/V on the global layers
  const pid_t pid = g->procs["Dt"]->pid();
  const std::string fp = DecodeLoad(Addr("Dt")).model_fingerprint();
  auto stub = internal::v1::DecodeWorker::NewStub(MakeChannel(Addr("Dt")));
  struct Push {
    grpc::ClientContext ctx;
    internal::v1::PushKvResponse resp;
    std::unique_ptr<grpc::ClientWriter<internal::v1::KvChunk>> writer;
  };
  std::vector<std::unique_ptr<Push>> open;
  const int64_t before = RssBytes(pid);
  int64_t bytes = 0;
  for (int i = 0; i < kPushes; ++i) {
    const std::string id = absl::StrCat("abandoned-", i);
    auto res = std::make_unique<Reservation>(Addr("Dt"), id, prompt);
    auto push = std::make_unique<Push>();
    push->writer = stub->PushKv(&push->ctx, &push->resp);
    bytes = 0;
    for (const auto& c : HandoffChunks(id, fp, prompt)) {
      ASSERT_TRUE(push->writer->Write(c));
      bytes += static_cast<int64_t>(c.data().payload().size());
    }
    ASSERT_TRUE(WaitUntil([&] { return DecodeLoad(Addr("Dt")).kv_bytes_allocated() == static_cast<uint64_t>(bytes); },
                          std::chrono::seconds(60)))
        << "the bytes of a hand-off in progress are not counted: " << DecodeLoad(Addr("Dt")).kv_bytes_allocated();
    res.reset();  // the request ends; its push stays open
    ASSERT_TRUE(WaitUntil([&] { return DecodeLoad(Addr("Dt")).kv_bytes_allocated() == 0; },
                          std::chrono::seconds(60)));
    open.push_back(std::move(push));
  }
  const int64_t growth = RssBytes(pid) - before;
  EXPECT_LT(growth, kPushes / 2 * bytes) << kPushes << " abandoned pushes of " << bytes << " bytes each grew RSS by " << growth;
  // The open streams are dead: the next chunk is refused.
  for (auto& p : open) {
    internal::v1::KvChunk more;
    more.mutable_progress()->set_prefilled_tokens(1);
    p->writer->Write(more);
    p->writer->WritesDone();
    EXPECT_FALSE(p->writer->Finish().ok());
  }
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 7: the internal RPCs check what any caller sends before working.
TEST_F(ReliabilityE2eTest, InternalRpcsValidateBeforeWorking) {
  auto pstub = internal::v1::PrefillWorker::NewStub(MakeChannel(Addr("P")));
  internal::v1::PrefillRequest preq;
  preq.set_request_id("huge");
  preq.set_decode_address(Addr("D1"));
  for (int64_t id : Prompt(40000, 5)) preq.add_token_ids(static_cast<uint32_t>(id));
  preq.mutable_sampling()->set_max_new_tokens(4);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    internal::v1::PrefillResponse resp;
    grpc::Status st = pstub->Prefill(&ctx, preq, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("max_context"), std::string::npos) << st.error_message();
  }
  preq.clear_token_ids();
  preq.add_token_ids(1);
  preq.set_decode_address("evil.example:1");
  {
    grpc::ClientContext ctx;
    internal::v1::PrefillResponse resp;
    grpc::Status st = pstub->Prefill(&ctx, preq, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  preq.set_decode_address(Addr("D1"));
  preq.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  {
    grpc::ClientContext ctx;
    internal::v1::PrefillResponse resp;
    EXPECT_EQ(pstub->Prefill(&ctx, preq, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  auto dstub = internal::v1::DecodeWorker::NewStub(MakeChannel(Addr("D1")));
  for (int64_t n : {int64_t{4}, int64_t{3000}}) {
    internal::v1::DecodeRequest d;
    d.set_request_id(absl::StrCat("local-", n));
    d.set_prompt_len(n);
    d.set_max_new_tokens(2);
    d.set_prefill_locally(true);
    for (int64_t id : Prompt(n, 6)) d.add_prompt_token_ids(static_cast<uint32_t>(id));
    // NaN temperature (n = 4), or a prompt above the local prefill limit.
    if (n == 4) d.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
    grpc::ClientContext ctx;
    auto reader = dstub->Decode(&ctx, d);
    internal::v1::DecodeResponse m;
    while (reader->Read(&m)) {
    }
    grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << n << ": " << st.error_message();
  }
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Defect 10: client text cannot forge an access-log line; negative
// temperature is greedy, as docs/design.md says.
TEST_F(ReliabilityE2eTest, AccessLogEscapesAndNegativeTemperatureIsGreedy) {
  auto req = IdsRequest(Prompt(10, 7), 5, /*temperature=*/-1.0f);
  req.set_request_id("x\nrequest forged: OK");
  GenerateResult got = Generate(Addr("R"), req);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.ids, Reference(req));
  ASSERT_TRUE(WaitUntil([&] { return g->procs["R"]->Log().find("\\nrequest forged") != std::string::npos; },
                        std::chrono::seconds(60)))
      << g->procs["R"]->Log();
  EXPECT_EQ(g->procs["R"]->Log().find("\nrequest forged"), std::string::npos);
}

// Defect 10: the hand-off timeout runs from the last progress, so a prefill
// far longer than it (Dt: 1 s) succeeds; Pt heartbeats every 200 ms.
// Defect 13: so does a prompt that waits in Pt's queue behind it that long:
// Pt opens its hand-off while it waits and heartbeats it.
// "Longer than the timeout" is shown by the order of events on Dt's own clock,
// not by a duration: once the long request prefills on Pt and the short one
// waits in Pt's queue, an idle reservation made on Dt (a lease of the same
// timeout, started later than both requests' own) must expire while Pt is
// still prefilling the first and still holds the second queued, and both
// requests must then succeed. The prefill is long by construction: 16,000
// prompt tokens in chunks of 4 on one thread (Stack::Worker), 4,000 chunks
// whose attention reads up to 16,000 keys each (~8 s in a Release build on a
// 2-core Zen 4 or Sapphire Rapids VM, ~8x the 1 s timeout; ~1.5 min under
// ASan).
TEST_F(ReliabilityE2eTest, PrefillAndQueueLongerThanTheHandoffTimeoutSucceed) {
  auto req = IdsRequest(Prompt(16000, 8), 3);
  req.mutable_sampling()->set_ignore_eos(true);
  const auto queued_req = IdsRequest(Prompt(40, 9), 4);
  GenerateResult got, queued;
  std::thread client([&] { got = Generate(Addr("Rt"), req, std::chrono::seconds(600)); });
  const bool prefilling = WaitUntil(
      [] { return DecodeLoad(Addr("Dt")).active_sequences() >= 1 && PrefillLoad(Addr("Pt")).active_sequences() >= 1; },
      std::chrono::seconds(60));
  EXPECT_TRUE(prefilling) << "the request never reached Dt and Pt";
  std::thread queued_client([&] { queued = Generate(Addr("Rt"), queued_req, std::chrono::seconds(600)); });
  const bool waiting = prefilling && WaitUntil([] { return PrefillLoad(Addr("Pt")).queued_requests() >= 1; },
                                               std::chrono::seconds(60));
  EXPECT_TRUE(waiting) << "the second request never waited in Pt's queue";
  if (waiting) {
    Reservation idle(Addr("Dt"), "idle-lease", 10);
    const grpc::Status st = idle.Status();  // returns when its lease expires
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_NE(st.error_message().find("--handoff-timeout-s"), std::string::npos) << st.error_message();
    const auto load = PrefillLoad(Addr("Pt"));
    EXPECT_GE(load.active_sequences(), 1u)
        << "the prefill ended before a later lease of Dt's 1 s hand-off timeout expired: too short to test the "
           "timeout (make the prompt longer)";
    EXPECT_GE(load.queued_requests(), 1u) << "the second request left Pt's queue before the later lease expired";
  }
  client.join();
  queued_client.join();
  ASSERT_TRUE(got.status.ok()) << got.status.error_message() << "\n" << g->procs["Dt"]->Log();
  EXPECT_EQ(got.ids.size(), 3u);
  ASSERT_TRUE(queued.status.ok()) << queued.status.error_message() << "\n" << g->procs["Dt"]->Log();
  EXPECT_EQ(queued.ids, Reference(queued_req));
}

// Section 5: a burst far larger than the prefill queue (16) is queued and
// served in full; a per-client cap answers RESOURCE_EXHAUSTED.
TEST_F(ReliabilityE2eTest, BurstOfAThousandIsServed) {
  constexpr int kBurst = 1000;
  std::atomic<int> ok{0};
  std::vector<std::string> errors;
  std::mutex mu;
  std::vector<std::thread> clients;
  for (int i = 0; i < kBurst; ++i) {
    clients.emplace_back([&, i] {
      GenerateResult r = Generate(Addr("R"), IdsRequest(Prompt(8, i), 2), std::chrono::seconds(300));
      if (r.status.ok()) {
        ++ok;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(r.status.error_message());
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kBurst) << (errors.empty() ? "" : errors.front());
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ReliabilityE2eTest, PerClientCapIsResourceExhausted) {
  g->Signal("P", SIGSTOP);
  std::vector<std::thread> held;
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([i] { Generate(Addr("Rc"), IdsRequest(Prompt(9, 20 + i), 2), std::chrono::seconds(30)); });
  }
  ASSERT_TRUE(WaitUntil([] { return MetricValue(g->Metrics("Rc"), "pdserve_router_inflight_requests") == 2; },
                        std::chrono::seconds(60)));
  GenerateResult third = Generate(Addr("Rc"), IdsRequest(Prompt(9, 22), 2));
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.status.error_message();
  EXPECT_NE(third.status.error_message().find("--max-inflight-per-client"), std::string::npos);
  g->Signal("P", SIGCONT);
  for (auto& t : held) t.join();
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

// Leases: a reservation whose hand-off never comes is released after the
// hand-off timeout (Dt: 1 s); a sender whose stream breaks mid-hand-off
// leaves nothing behind, and the request fails as the prefill side's
// (UNAVAILABLE: another prefill worker may succeed).
TEST_F(ReliabilityE2eTest, LeasesEndReservationsAndHalfReceivedHandoffs) {
  {
    Reservation res(Addr("Dt"), "never-pushed", 10);
    grpc::Status st = res.Status();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    // Released by the hand-off timeout (the message names it), whenever that
    // fires on a loaded machine: no bound on the time taken.
    EXPECT_NE(st.error_message().find("--handoff-timeout-s"), std::string::npos) << st.error_message();
  }
  {
    Reservation res(Addr("Dt"), "half-pushed", 3000);
    auto stub = internal::v1::DecodeWorker::NewStub(MakeChannel(Addr("Dt")));
    grpc::ClientContext ctx;
    internal::v1::PushKvResponse resp;
    auto writer = stub->PushKv(&ctx, &resp);
    auto chunks = HandoffChunks("half-pushed", DecodeLoad(Addr("Dt")).model_fingerprint(), 3000);
    for (size_t i = 0; i < chunks.size() / 2; ++i) ASSERT_TRUE(writer->Write(chunks[i]));
    ASSERT_TRUE(WaitUntil([&] { return DecodeLoad(Addr("Dt")).kv_bytes_allocated() > 0; }, std::chrono::seconds(60)));
    ctx.TryCancel();  // the prefill worker dies
    writer->Finish();
    grpc::Status st = res.Status();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_TRUE(WaitUntil([&] {
      auto l = DecodeLoad(Addr("Dt"));
      return l.kv_bytes_allocated() == 0 && l.kv_bytes_used() == 0 && l.active_sequences() == 0;
    }, std::chrono::seconds(2)));
  }
}

// Section 5: a client that reads nothing while 10k tokens are generated
// cannot make the router buffer them: with a small flow-control window on
// the client (no BDP growth), the router's per-stream queue fills, the
// router cancels the stream and the decode worker stops generating. (An
// older router kept every token queued and finished the request.)
TEST_F(ReliabilityE2eTest, ClientThatReadsNothingIsCancelledNotBuffered) {
  const pid_t router = g->procs["Rt"]->pid();
  const int64_t before = RssBytes(router);
  auto req = IdsRequest(Prompt(10, 9), 10000);
  req.mutable_sampling()->set_ignore_eos(true);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4096);
  auto stub = pdserve::v1::Generator::NewStub(
      grpc::CreateCustomChannel(Addr("Rt"), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  auto reader = stub->Generate(&ctx, req);
  ASSERT_TRUE(WaitUntil([&] { return DecodeLoad(Addr("Dt")).active_sequences() == 1; }, std::chrono::seconds(60)));
  EXPECT_TRUE(WaitUntil([&] { return DecodeLoad(Addr("Dt")).active_sequences() == 0; }, std::chrono::seconds(180)))
      << "the decode worker still generates for a client that reads nothing";
  const int64_t growth = RssBytes(router) - before;
  EXPECT_LT(growth, int64_t{32} << 20) << "the router grew by " << growth << " bytes";
  // Now read what did arrive: fewer than 10000 tokens, then the cancel.
  pdserve::v1::GenerateResponse msg;
  int64_t tokens = 0;
  while (reader->Read(&msg)) tokens += msg.token_ids_size();
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_LT(tokens, 10000);
}

}  // namespace
}  // namespace pdserve
