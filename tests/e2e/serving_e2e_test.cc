// End to end: the real pdserve-router, pdserve-prefill and pdserve-decode
// processes on loopback, driven over real gRPC. Generated tokens must equal
// the single-process engine's (what pdserve-generate runs), and every
// failure must end in its documented status with no KV left behind.
//
// The stack (all started once, in SetUpTestSuite):
//   router  R   -> prefill P1, P2 and decode D1, D2 (f32 KV, chunk 4)
//   router  Rs  -> P1 and D1, D2, with loads polled once at start (stale), so
//                  placement must recover from RESOURCE_EXHAUSTED by retrying
//   router  Rf  -> P1 and Dbad (other weights): fingerprint mismatch
//   router  Rb  -> Pb, Db with bf16 KV
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/engine/engine.h"
#include "common/handoff/kv_wire.h"
#include "common/net/sampling_validation.h"
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

constexpr int64_t kChunk = 4;  // prefill chunk: a 30-token prompt takes 8 chunks

struct Stack {
  ::pdserve::testing::TempDir dir;
  std::string model, other_model;
  std::map<std::string, std::unique_ptr<ChildProcess>> procs;
  std::map<std::string, std::string> addr;  // name -> 127.0.0.1:port
  std::map<std::string, int> metrics_port;   // name -> /metrics port
  std::unique_ptr<Engine> ref_f32, ref_bf16;

  std::map<std::string, std::vector<std::string>> argvs;  // name -> its command line

  void StartProc(const std::string& name, std::vector<std::string> argv) {
    auto p = std::make_unique<ChildProcess>();
    p->Start(argv, dir.Sub(name + ".log"));
    procs[name] = std::move(p);
    argvs[name] = std::move(argv);
  }
  // Starts a stopped process again on its old port (the routers keep its
  // address), and waits until it serves.
  void Restart(const std::string& name) {
    std::vector<std::string> argv = argvs[name];
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--listen") argv[i + 1] = addr[name];
    }
    procs[name]->Stop(SIGKILL);
    auto p = std::make_unique<ChildProcess>();
    p->Start(argv, dir.Sub(name + ".restarted.log"));
    procs[name] = std::move(p);
    AwaitPort(name);
  }
  void AwaitPort(const std::string& name) {
    const int port = procs[name]->WaitForPort();
    ASSERT_GT(port, 0) << name << " did not start:\n" << procs[name]->Log();
    addr[name] = absl::StrCat("127.0.0.1:", port);
    metrics_port[name] = procs[name]->WaitForPort(std::chrono::seconds(10), "metrics on port ([0-9]+)");
  }
  void StartWorker(const std::string& name, const std::string& kind, const std::string& model,
                   const std::string& kv_dtype, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {Bin(kind == "decode" ? "decode_service/pdserve-decode"
                                                          : "prefill_service/pdserve-prefill"),
                                     "--model", model, "--listen", "127.0.0.1:0", "--threads", "1",
                                     "--kv-dtype", kv_dtype, "--prefill-chunk", std::to_string(kChunk),
                                     "--metrics-port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    StartProc(name, argv);
  }
  void StartRouter(const std::string& name, const std::string& prefill, const std::string& decode,
                   std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {Bin("router/pdserve-router"), "--model", model, "--listen", "127.0.0.1:0",
                                     "--prefill", prefill, "--decode", decode, "--poll-interval-ms", "100",
                                     "--max-new-tokens-cap", "4000", "--metrics-port", "0",
                                     "--http-listen", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    StartProc(name, argv);
  }
};

Stack* g_stack = nullptr;

class ServingE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_stack = new Stack();
    Stack& s = *g_stack;
    s.model = s.dir.Sub("model");
    s.other_model = s.dir.Sub("other");
    ASSERT_TRUE(SaveCheckpoint(RandomWeights(E2eConfig(), 1), s.model, StDtype::kF32).ok());
    ASSERT_TRUE(SaveCheckpoint(RandomWeights(E2eConfig(), 2), s.other_model, StDtype::kF32).ok());
    // Decode budgets of 8 MiB: small enough for a test to fill.
    const std::vector<std::string> budget = {"--kv-budget-mb", "8"};
    s.StartWorker("D1", "decode", s.model, "f32", budget);
    s.StartWorker("D2", "decode", s.model, "f32", budget);
    s.StartWorker("Dbad", "decode", s.other_model, "f32");
    s.StartWorker("Db", "decode", s.model, "bf16");
    for (const char* d : {"D1", "D2", "Dbad", "Db"}) s.AwaitPort(d);
    s.StartWorker("P1", "prefill", s.model, "f32");
    s.StartWorker("P2", "prefill", s.model, "f32");
    s.StartWorker("Pb", "prefill", s.model, "bf16");
    s.StartWorker("Pq", "prefill", s.model, "f32", {"--max-queue", "1"});
    for (const char* p : {"P1", "P2", "Pb", "Pq"}) s.AwaitPort(p);
    const std::string d12 = s.addr["D1"] + "," + s.addr["D2"];
    s.StartRouter("R", s.addr["P1"] + "," + s.addr["P2"], d12);
    s.StartRouter("Rs", s.addr["P1"], d12, {"--poll-interval-ms", "3600000"});
    s.StartRouter("Rf", s.addr["P1"], s.addr["Dbad"]);
    s.StartRouter("Rb", s.addr["Pb"], s.addr["Db"]);
    // Prompts of up to 13 tokens are prefilled on the decode worker.
    s.StartRouter("Rl", s.addr["P1"], d12, {"--local-prefill-max-tokens", "13"});
    // One request placed at a time: the rest wait in its admission queue.
    s.StartRouter("Rq", s.addr["P1"], d12, {"--max-inflight", "1"});
    for (const char* r : {"R", "Rs", "Rf", "Rb", "Rl", "Rq"}) s.AwaitPort(r);

    EngineOptions eo;
    eo.num_threads = 1;
    eo.prefill_chunk = kChunk;
    auto f32 = Engine::Load(s.model, eo);
    ASSERT_TRUE(f32.ok()) << f32.status();
    s.ref_f32 = std::move(*f32);
    eo.kv.dtype = KvDtype::kBF16;
    auto bf16 = Engine::Load(s.model, eo);
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    s.ref_bf16 = std::move(*bf16);
  }

  static void TearDownTestSuite() {
    delete g_stack;
    g_stack = nullptr;
  }

  void SetUp() override { ASSERT_NE(g_stack, nullptr); }

  static const std::string& Addr(const std::string& name) { return g_stack->addr[name]; }

  // The single-process answer for `req`.
  static std::vector<int64_t> Reference(const pdserve::v1::GenerateRequest& req, bool bf16 = false) {
    GenerateRequest r;
    r.prompt.assign(req.token_ids().begin(), req.token_ids().end());
    r.max_new_tokens = req.sampling().max_new_tokens();
    r.sampling = SamplingFromProto(req.sampling());
    r.stop_at_eos = !req.sampling().ignore_eos();
    auto out = (bf16 ? g_stack->ref_bf16 : g_stack->ref_f32)->Generate(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<int64_t>{};
  }

  // Every decode and prefill worker of the main stack holds no KV.
  static bool AllFree() {
    for (const char* d : {"D1", "D2"}) {
      auto l = DecodeLoad(Addr(d));
      if (l.kv_bytes_used() != 0 || l.kv_bytes_allocated() != 0 || l.active_sequences() != 0) return false;
    }
    for (const char* p : {"P1", "P2"}) {
      auto l = PrefillLoad(Addr(p));
      if (l.kv_bytes_used() != 0 || l.active_sequences() != 0) return false;
    }
    return true;
  }
};

TEST_F(ServingE2eTest, TokensEqualTheSingleProcessEngine) {
  struct Case {
    int64_t prompt_len;
    float temperature, top_p;
    uint32_t top_k;
  };
  // Shorter than the window (8), longer, and spanning several 4-token chunks;
  // greedy and seeded sampling.
  for (const Case& c : {Case{3, 0, 0, 0}, Case{13, 0, 0, 0}, Case{30, 0, 0, 0}, Case{3, 0.9f, 0.95f, 0},
                        Case{13, 1.0f, 0.8f, 40}, Case{30, 0.7f, 0, 0}}) {
    auto req = IdsRequest(Prompt(c.prompt_len, c.prompt_len), 24, c.temperature, c.top_p, c.top_k, 1234);
    req.mutable_sampling()->set_ignore_eos(true);
    GenerateResult got = Generate(Addr("R"), req);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.ids, Reference(req)) << "prompt " << c.prompt_len << " temperature " << c.temperature;
    EXPECT_EQ(got.finish, pdserve::v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(got.usage.prompt_tokens(), static_cast<uint32_t>(c.prompt_len));
    EXPECT_EQ(got.usage.generated_tokens(), 24u);
    EXPECT_GT(got.usage.ttft_ns(), 0u);
    EXPECT_GE(got.usage.e2e_ns(), got.usage.ttft_ns());
    // f32: 2 windowed layers x min(T, 8) rows + 2 global layers x T rows, K and V.
    const int64_t rows = 2 * std::min<int64_t>(c.prompt_len, 8) + 2 * c.prompt_len;
    EXPECT_EQ(got.usage.kv_handoff_bytes(), static_cast<uint64_t>(rows * 2 * 2 * 16 * 4));
    EXPECT_GT(got.usage.kv_handoff_ns(), 0u);
  }
}

TEST_F(ServingE2eTest, Bf16KvMatchesTheEngineWithBf16Kv) {
  for (int64_t len : {3, 13, 30}) {
    for (float temp : {0.0f, 0.8f}) {
      auto req = IdsRequest(Prompt(len, 7), 20, temp, 0.9f, 0, 99);
      req.mutable_sampling()->set_ignore_eos(true);
      GenerateResult got = Generate(Addr("Rb"), req);
      ASSERT_TRUE(got.status.ok()) << got.status.error_message();
      EXPECT_EQ(got.ids, Reference(req, /*bf16=*/true)) << "prompt " << len << " temperature " << temp;
      const int64_t rows = 2 * std::min<int64_t>(len, 8) + 2 * len;
      EXPECT_EQ(got.usage.kv_handoff_bytes(), static_cast<uint64_t>(rows * 2 * 2 * 16 * 2)) << "bf16 halves it";
    }
  }
}

TEST_F(ServingE2eTest, SixteenConcurrentRequestsAllCorrectAndBatched) {
  constexpr int kN = 16;
  std::vector<pdserve::v1::GenerateRequest> reqs;
  for (int i = 0; i < kN; ++i) {
    auto r = IdsRequest(Prompt(2 + (i * 7) % 29, i), 40 + (i % 4) * 8, i % 2 ? 0.8f : 0.0f, 0.95f, 0, i);
    r.mutable_sampling()->set_ignore_eos(true);
    reqs.push_back(r);
  }
  std::vector<GenerateResult> got(kN);
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) threads.emplace_back([&, i] { got[i] = Generate(Addr("R"), reqs[i]); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, Reference(reqs[i])) << "request " << i;
  }
  const uint32_t batched = std::max(DecodeLoad(Addr("D1")).max_batch_size(), DecodeLoad(Addr("D2")).max_batch_size());
  EXPECT_GT(batched, 1u) << "the decode workers never ran more than one sequence per step";
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ServingE2eTest, LocalPrefillOnTheDecodeWorkerGivesTheSameTokens) {
  using ::pdserve::testing::MetricValue;
  auto local_prefills = [] {
    double v = 0;
    for (const char* d : {"D1", "D2"}) {
      v += MetricValue(::pdserve::testing::HttpGetMetrics(g_stack->metrics_port[d]),
                       "pdserve_decode_local_prefills_total");
    }
    return v;
  };
  const double before = local_prefills();
  // 3 and 13 tokens go local (13 spans 4 chunks and the window of 8), 30
  // through the prefill worker; all at once, so local prefills run between
  // the steps of streams already decoding.
  std::vector<pdserve::v1::GenerateRequest> reqs;
  for (int64_t len : {30, 3, 13, 30, 13, 3}) {
    auto r = IdsRequest(Prompt(len, len + 3), 30, reqs.size() % 2 ? 0.8f : 0.0f, 0.9f, 0, 77 + reqs.size());
    r.mutable_sampling()->set_ignore_eos(true);
    reqs.push_back(r);
  }
  std::vector<GenerateResult> got(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) threads.emplace_back([&, i] { got[i] = Generate(Addr("Rl"), reqs[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, Reference(reqs[i])) << "request " << i;
    const bool local = reqs[i].token_ids_size() <= 13;
    EXPECT_EQ(got[i].usage.kv_handoff_bytes() == 0, local) << "request " << i;
    EXPECT_EQ(got[i].usage.prefill_worker() == got[i].usage.decode_worker(), local) << "request " << i;
  }
  EXPECT_EQ(local_prefills() - before, 4);
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ServingE2eTest, BadInputsGetInvalidArgumentAndTheServersKeepServing) {
  struct Bad {
    const char* what;
    pdserve::v1::GenerateRequest req;
    const char* message;
  };
  std::vector<Bad> bad;
  auto ok = IdsRequest({1, 2, 3}, 4);
  {
    auto r = ok;
    r.set_text("hi");
    bad.push_back({"text and ids", r, "not both"});
  }
  {
    auto r = ok;
    r.clear_token_ids();
    bad.push_back({"no prompt", r, "prompt is empty"});
  }
  {
    auto r = ok;
    r.set_token_ids(1, 300);
    bad.push_back({"id >= vocab", r, "token_ids[1] = 300"});
  }
  {
    auto r = IdsRequest(Prompt(20, 1), 4);
    r.mutable_sampling()->set_max_new_tokens(4001);
    bad.push_back({"over the cap", r, "cap of 4000"});
  }
  {
    auto r = ok;
    r.mutable_sampling()->set_max_new_tokens(0);
    bad.push_back({"max_new 0", r, "max_new_tokens must be at least 1"});
  }
  {
    auto r = ok;
    r.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
    bad.push_back({"temperature", r, "temperature must be a finite number"});
  }
  {
    auto r = ok;
    r.mutable_sampling()->set_top_p(1.5f);
    bad.push_back({"top_p", r, "top_p must be in [0, 1]"});
  }
  for (const Bad& b : bad) {
    GenerateResult got = Generate(Addr("R"), b.req);
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.what;
    EXPECT_NE(got.status.error_message().find(b.message), std::string::npos)
        << b.what << ": " << got.status.error_message();
  }
  // Past max_context: a router whose model allows 32768 tokens.
  auto long_req = IdsRequest(std::vector<int64_t>(32000, 1), 1000);
  GenerateResult got = Generate(Addr("R"), long_req);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(got.status.error_message().find("max_context"), std::string::npos) << got.status.error_message();

  GenerateResult after = Generate(Addr("R"), ok);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.ids, Reference(ok));
}

TEST_F(ServingE2eTest, TextPromptsAndStopSequences) {
  // The byte tokenizer: text "hello" is its bytes.
  pdserve::v1::GenerateRequest r;
  r.set_text("hello");
  r.mutable_sampling()->set_max_new_tokens(12);
  r.mutable_sampling()->set_ignore_eos(true);
  GenerateResult got = Generate(Addr("R"), r);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  auto same = IdsRequest({'h', 'e', 'l', 'l', 'o'}, 12);
  same.mutable_sampling()->set_ignore_eos(true);
  EXPECT_EQ(got.ids, Reference(same));
  EXPECT_EQ(got.usage.prompt_tokens(), 5u);

  // A stop string made of the text of generated tokens 3..4 stops there,
  // and the text before it is all that is returned.
  auto req = IdsRequest(Prompt(9, 3), 40, 0.9f, 0, 0, 5);
  req.mutable_sampling()->set_ignore_eos(true);
  std::vector<int64_t> ref = Reference(req);
  // The first printable ASCII token: nothing before it can spell it.
  size_t stop_at = ref.size();
  for (size_t i = 0; i < ref.size() && stop_at == ref.size(); ++i) {
    if (ref[i] >= 32 && ref[i] < 127) stop_at = i;
  }
  ASSERT_LT(stop_at, ref.size()) << "no printable token in 40: pick another prompt";
  req.mutable_sampling()->add_stop(std::string(1, static_cast<char>(ref[stop_at])));
  got = Generate(Addr("R"), req);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.finish, pdserve::v1::FINISH_REASON_STOP);
  EXPECT_EQ(got.ids, std::vector<int64_t>(ref.begin(), ref.begin() + stop_at + 1));
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ServingE2eTest, FingerprintMismatchIsFailedPrecondition) {
  GenerateResult got = Generate(Addr("Rf"), IdsRequest({1, 2, 3}, 4));
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << got.status.error_message();
  EXPECT_NE(got.status.error_message().find("fingerprint"), std::string::npos) << got.status.error_message();
  auto l = DecodeLoad(Addr("Dbad"));
  EXPECT_EQ(l.kv_bytes_used(), 0u);
  EXPECT_EQ(l.active_sequences(), 0u);
}

// Direct hand-offs to D2 with damaged chunk streams.
class HandoffAttack {
 public:
  HandoffAttack(const std::string& decode, const std::string& request_id, int64_t prompt_len)
      : stub_(internal::v1::DecodeWorker::NewStub(MakeChannel(decode))), request_id_(request_id) {
    internal::v1::DecodeRequest dreq;
    dreq.set_request_id(request_id);
    dreq.set_prompt_len(prompt_len);
    dreq.set_max_new_tokens(5);
    reader_ = stub_->Decode(&dctx_, dreq);
    internal::v1::DecodeResponse admitted;
    EXPECT_TRUE(reader_->Read(&admitted) && admitted.admitted());
  }

  // Pushes `chunks`; returns PushKv's status.
  grpc::Status Push(const std::vector<internal::v1::KvChunk>& chunks) {
    grpc::ClientContext ctx;
    internal::v1::PushKvResponse resp;
    auto writer = stub_->PushKv(&ctx, &resp);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Gives up the reservation, as a router that goes away would.
  void Cancel() { dctx_.TryCancel(); }

  // The Decode stream's end.
  grpc::Status DecodeStatus() {
    internal::v1::DecodeResponse msg;
    while (reader_->Read(&msg)) {
    }
    return reader_->Finish();
  }

 private:
  std::unique_ptr<internal::v1::DecodeWorker::Stub> stub_;
  std::string request_id_;
  grpc::ClientContext dctx_;
  std::unique_ptr<grpc::ClientReader<internal::v1::DecodeResponse>> reader_;
};

std::vector<internal::v1::KvChunk> ValidChunks(const std::string& request_id, const std::string& fingerprint,
                                               int64_t prompt_len) {
  const ModelConfig c = E2eConfig();
  internal::v1::KvHeader h;
  h.set_request_id(request_id);
  h.set_model_fingerprint(fingerprint);
  h.set_dtype(internal::v1::KV_DTYPE_F32);
  h.set_prompt_len(prompt_len);
  h.mutable_sampling()->set_max_new_tokens(5);
  KvChunkEncoder enc(c, h, /*max_chunk_bytes=*/256);
  std::vector<internal::v1::KvChunk> out = {enc.Header()};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t rows = HandoffRows(c, l, prompt_len);
    auto layer = enc.Layer(l, at::randn({rows, c.n_kv_heads, c.head_dim}), at::randn({rows, c.n_kv_heads, c.head_dim}));
    EXPECT_TRUE(layer.ok());
    out.insert(out.end(), layer->begin(), layer->end());
  }
  out.push_back(*enc.Commit(7));
  return out;
}

TEST_F(ServingE2eTest, DamagedHandoffsAreRejectedAndLeakNothing) {
  const std::string fp = DecodeLoad(Addr("D2")).model_fingerprint();
  ASSERT_FALSE(fp.empty());
  struct Damage {
    const char* name;
    std::function<void(std::vector<internal::v1::KvChunk>*)> apply;
    const char* message;
    grpc::StatusCode code;
  };
  const std::vector<Damage> damages = {
      {"corrupted", [](auto* c) { (*(*c)[4].mutable_data()->mutable_payload())[2] ^= 1; }, "chunk 4 fails its checksum",
       grpc::StatusCode::FAILED_PRECONDITION},
      {"truncated", [](auto* c) { c->resize(c->size() - 3); }, "truncated", grpc::StatusCode::FAILED_PRECONDITION},
      {"reordered", [](auto* c) { std::swap((*c)[5], (*c)[6]); }, "chunk 6 out of order, expected 5",
       grpc::StatusCode::FAILED_PRECONDITION},
      {"duplicated", [](auto* c) { c->insert(c->begin() + 3, (*c)[2]); }, "duplicate chunk 2",
       grpc::StatusCode::FAILED_PRECONDITION},
      {"wrong fingerprint", nullptr, "fingerprint", grpc::StatusCode::FAILED_PRECONDITION},
  };
  int n = 0;
  for (const Damage& d : damages) {
    const std::string rid = absl::StrCat("attack-", n++);
    HandoffAttack attack(Addr("D2"), rid, 13);
    auto chunks = ValidChunks(rid, d.apply ? fp : "not-the-model", 13);
    if (d.apply) d.apply(&chunks);
    grpc::Status st = attack.Push(chunks);
    EXPECT_EQ(st.error_code(), d.code) << d.name << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(d.message), std::string::npos) << d.name << ": " << st.error_message();
    grpc::Status ds = attack.DecodeStatus();
    EXPECT_EQ(ds.error_code(), d.code) << d.name << " (decode stream): " << ds.error_message();
    auto l = DecodeLoad(Addr("D2"));
    EXPECT_EQ(l.kv_bytes_used(), 0u) << d.name;
    EXPECT_EQ(l.kv_bytes_allocated(), 0u) << d.name;
    EXPECT_EQ(l.active_sequences(), 0u) << d.name;
  }
  // A hand-off nobody admitted.
  HandoffAttack unrelated(Addr("D2"), "admitted", 13);
  grpc::Status st = unrelated.Push(ValidChunks("never-admitted", fp, 13));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  // An intact one is accepted and decodes.
  HandoffAttack good(Addr("D2"), "good", 13);
  EXPECT_TRUE(good.Push(ValidChunks("good", fp, 13)).ok());
  EXPECT_TRUE(good.DecodeStatus().ok());
  EXPECT_TRUE(unrelated.Push(ValidChunks("admitted", fp, 13)).ok());
  EXPECT_TRUE(unrelated.DecodeStatus().ok());
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ServingE2eTest, ClientCancelFreesEverything) {
  auto req = IdsRequest(Prompt(20, 4), 3000);
  req.mutable_sampling()->set_ignore_eos(true);
  std::atomic<bool> saw_load{false};
  GenerateResult got = Generate(Addr("R"), req, std::chrono::seconds(60), [&](grpc::ClientContext* ctx, auto& r) {
    if (r.ids.size() >= 3 && !saw_load) {
      saw_load = DecodeLoad(Addr("D1")).kv_bytes_used() + DecodeLoad(Addr("D2")).kv_bytes_used() > 0;
      ctx->TryCancel();
    }
  });
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::CANCELLED) << got.status.error_message();
  EXPECT_TRUE(saw_load) << "the request held no KV while streaming";
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60))) << "KV still held after the client cancelled";
}

TEST_F(ServingE2eTest, FullKvBudgetSendsTheRequestToTheOtherWorker) {
  // Rs saw both decode workers idle at startup and never polls again, so it
  // tries them in address order: fill the first one's budget.
  const std::string first = std::min(Addr("D1"), Addr("D2"));
  const std::string other = std::max(Addr("D1"), Addr("D2"));
  const int64_t free = DecodeLoad(first).kv_bytes_free();
  const ModelConfig c = E2eConfig();
  int64_t t = 8;
  while (MixedKVCache::BytesFor(CacheLayout(c), KvDtype::kF32, t + 1) <= free) ++t;
  HandoffAttack filler(first, "filler", t - 5);  // reserves (t - 5) + 5 tokens: all but < 2 rows of the budget
  ASSERT_LT(DecodeLoad(first).kv_bytes_free(), static_cast<uint64_t>(MixedKVCache::BytesFor(CacheLayout(c), KvDtype::kF32, 40)));

  auto req = IdsRequest(Prompt(20, 5), 20);
  req.mutable_sampling()->set_ignore_eos(true);
  GenerateResult got = Generate(Addr("Rs"), req);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.usage.decode_worker(), other);
  EXPECT_EQ(got.ids, Reference(req));
  // Releasing the filler frees its reservation.
  filler.Cancel();
  EXPECT_EQ(filler.DecodeStatus().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60)));
}

TEST_F(ServingE2eTest, DeadlineStopsPrefillAndFreesEverything) {
  // 12000 tokens in 4-token chunks: seconds of prefill, unless it stops.
  auto req = IdsRequest(Prompt(12000, 8), 8);
  // Prefill calls ended on P1 and P2: with `code`, or all of them ("").
  auto prefill_ends = [](const std::string& code) {
    double n = 0;
    for (const char* p : {"P1", "P2"}) {
      n += MetricValue(::pdserve::testing::HttpGetMetrics(g_stack->metrics_port[p]),
                       code.empty() ? "pdserve_prefill_requests_total"
                                    : "pdserve_prefill_requests_total{code=\"" + code + "\"}");
    }
    return n;
  };
  const double ok0 = prefill_ends("OK"), failed0 = prefill_ends("") - ok0;
  GenerateResult got = Generate(Addr("R"), req, std::chrono::seconds(1));
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << got.status.error_message();
  // The prefill ended as a failure (the router's cancel, or its hand-off
  // broken under it), not as a success; then nothing is held anywhere.
  EXPECT_TRUE(WaitUntil([&] { return prefill_ends("") - prefill_ends("OK") > failed0; }, std::chrono::seconds(60)))
      << "the prefill of the expired request never ended";
  EXPECT_EQ(prefill_ends("OK"), ok0) << "the prefill of the expired request succeeded";
  EXPECT_TRUE(WaitUntil(AllFree, std::chrono::seconds(60))) << "a worker still holds the expired request";
}

TEST_F(ServingE2eTest, FullPrefillQueueIsResourceExhaustedAndCancelStopsPrefill) {
  // Pq runs one prompt and queues one more. Nothing admits these on D1,
  // so they could only fail at their hand-off, seconds of prefill away.
  auto stub = internal::v1::PrefillWorker::NewStub(MakeChannel(Addr("Pq")));
  internal::v1::PrefillRequest preq;
  preq.set_decode_address(Addr("D1"));
  for (int64_t id : Prompt(12000, 9)) preq.add_token_ids(static_cast<uint32_t>(id));
  preq.mutable_sampling()->set_max_new_tokens(4);
  grpc::ClientContext ctx[3];
  internal::v1::PrefillResponse resp[3];
  grpc::Status st[3];
  std::vector<std::thread> calls;
  for (int i = 0; i < 2; ++i) {
    preq.set_request_id(absl::StrCat("queued-", i));
    calls.emplace_back([&, i, preq] { st[i] = stub->Prefill(&ctx[i], preq, &resp[i]); });
    ASSERT_TRUE(WaitUntil([&] { return PrefillLoad(Addr("Pq")).active_sequences() +
                                           PrefillLoad(Addr("Pq")).queued_requests() == static_cast<uint32_t>(i + 1); },
                          std::chrono::seconds(60)));
  }
  preq.set_request_id("rejected");
  st[2] = stub->Prefill(&ctx[2], preq, &resp[2]);
  EXPECT_EQ(st[2].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st[2].error_message();
  EXPECT_NE(st[2].error_message().find("queue full"), std::string::npos) << st[2].error_message();
  const std::string cancelled = "pdserve_prefill_requests_total{code=\"CANCELLED\"}";
  auto pq_cancelled = [&] { return MetricValue(::pdserve::testing::HttpGetMetrics(g_stack->metrics_port["Pq"]), cancelled); };
  const double cancelled0 = pq_cancelled();
  ctx[0].TryCancel();
  ctx[1].TryCancel();
  for (auto& t : calls) t.join();
  EXPECT_EQ(st[0].error_code(), grpc::StatusCode::CANCELLED) << st[0].error_message();
  EXPECT_TRUE(WaitUntil([&] {
    auto l = PrefillLoad(Addr("Pq"));
    return l.active_sequences() == 0 && l.queued_requests() == 0 && l.kv_bytes_used() == 0;
  }, std::chrono::seconds(60))) << "the cancelled prefills never ended";
  // Both ended as cancelled (the running one stopped by the cancel, the
  // queued one taken off the queue), not run to their end: whatever the time
  // that took, a prefill that kept running would end with another code.
  EXPECT_EQ(pq_cancelled() - cancelled0, 2) << "the cancelled prefill kept running";
}

TEST_F(ServingE2eTest, MetricsAddUpAfterRealTraffic) {
  auto scrape = [](const char* name) { return ::pdserve::testing::HttpGetMetrics(g_stack->metrics_port[name]); };
  using ::pdserve::testing::MetricValue;
  auto sum = [&](const std::vector<const char*>& names, const std::string& series) {
    double v = 0;
    for (const char* n : names) v += MetricValue(scrape(n), series);
    return v;
  };
  const std::string ok_router = "pdserve_router_requests_total{code=\"OK\"}";
  const std::string ok_prefill = "pdserve_prefill_requests_total{code=\"OK\"}";
  const std::string length = "pdserve_decode_requests_total{outcome=\"length\"}";
  ASSERT_NE(scrape("R").find("# TYPE pdserve_router_ttft_seconds histogram"), std::string::npos) << scrape("R");
  const double r0 = MetricValue(scrape("R"), ok_router), p0 = sum({"P1", "P2"}, ok_prefill),
               d0 = sum({"D1", "D2"}, length), g0 = MetricValue(scrape("R"), "pdserve_router_generated_tokens_total"),
               b0 = sum({"P1", "P2"}, "pdserve_kv_handoff_bytes_total"),
               t0 = MetricValue(scrape("R"), "pdserve_router_ttft_seconds_count");
  double bytes = 0;
  for (int i = 0; i < 5; ++i) {
    auto req = IdsRequest(Prompt(5 + 4 * i, 20 + i), 6 + i);
    req.mutable_sampling()->set_ignore_eos(true);
    GenerateResult got = Generate(Addr("R"), req);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    bytes += got.usage.kv_handoff_bytes();
  }
  GenerateResult bad = Generate(Addr("R"), IdsRequest({1, 2, 999}, 4));
  ASSERT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MetricValue(scrape("R"), ok_router) - r0, 5);
  EXPECT_GE(MetricValue(scrape("R"), "pdserve_router_requests_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(MetricValue(scrape("R"), "pdserve_router_generated_tokens_total") - g0, 6 + 7 + 8 + 9 + 10);
  EXPECT_EQ(MetricValue(scrape("R"), "pdserve_router_ttft_seconds_count") - t0, 5);
  EXPECT_EQ(sum({"P1", "P2"}, ok_prefill) - p0, 5);
  EXPECT_EQ(sum({"P1", "P2"}, "pdserve_kv_handoff_bytes_total") - b0, bytes);
  EXPECT_EQ(sum({"D1", "D2"}, length) - d0, 5);
  EXPECT_TRUE(WaitUntil([&] { return sum({"D1", "D2"}, "pdserve_decode_kv_bytes_used") == 0 &&
                                     sum({"D1", "D2"}, "pdserve_decode_active_sequences") == 0 &&
                                     sum({"P1", "P2"}, "pdserve_prefill_kv_bytes") == 0; },
                        std::chrono::seconds(60)))
      << scrape("D1");
  EXPECT_GT(MetricValue(scrape("D1"), "pdserve_decode_kv_bytes_free"), 0);
}

// The autoscaling gauges (issue 15) move with real traffic: a decoding
// stream raises its decode worker's KV usage ratio and running count, a
// burst past --max-inflight 1 waits in the router's queue, and all return to
// 0 once the streams are cancelled; the cancelled streams count as aborted
// completions. Every series carries the model label.
TEST_F(ServingE2eTest, AutoscalingGaugesMoveWithTraffic) {
  using ::pdserve::testing::MetricValue;
  auto scrape = [](const char* name) { return ::pdserve::testing::HttpGetMetrics(g_stack->metrics_port[name]); };
  auto decode_sum = [&](const std::string& series) {
    return MetricValue(scrape("D1"), series) + MetricValue(scrape("D2"), series);
  };
  const std::string ratio = "pdserve_decode_kv_usage_ratio", waiting = "pdserve_router_requests_waiting";
  const std::string aborted = "pdserve_router_completions_total{finish_reason=\"abort\"}";
  const std::string model = "{model=\"" + E2eConfig().name + "\"}";
  ASSERT_NE(scrape("D1").find(ratio + model + " "), std::string::npos) << scrape("D1");
  ASSERT_NE(scrape("Rq").find(waiting + model + " "), std::string::npos) << scrape("Rq");
  EXPECT_EQ(decode_sum(ratio), 0);
  const std::string completions = "pdserve_router_completions_total";
  const double aborted0 = MetricValue(scrape("Rq"), aborted), completions0 = MetricValue(scrape("Rq"), completions),
               itl0 = MetricValue(scrape("Rq"), "pdserve_router_itl_seconds_count");

  std::atomic<bool> stop{false};
  std::vector<std::thread> streams;
  auto start_stream = [&](int seed) {
    streams.emplace_back([&, seed] {
      auto req = IdsRequest(Prompt(10, seed), 3000);
      req.mutable_sampling()->set_ignore_eos(true);
      Generate(Addr("Rq"), req, std::chrono::seconds(60), [&](grpc::ClientContext* ctx, const GenerateResult&) {
        if (stop) ctx->TryCancel();
      });
    });
  };
  start_stream(31);
  EXPECT_TRUE(WaitUntil([&] { return decode_sum(ratio) > 0 && decode_sum("pdserve_decode_requests_running") >= 1; },
                        std::chrono::seconds(60)))
      << scrape("D1") << scrape("D2");
  EXPECT_LE(decode_sum(ratio), 2.0);  // each worker's ratio is within [0, 1]
  start_stream(32);
  start_stream(33);
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(scrape("Rq"), waiting) >= 1; }, std::chrono::seconds(60)))
      << scrape("Rq");
  stop = true;
  for (auto& t : streams) t.join();
  EXPECT_TRUE(WaitUntil([&] { return decode_sum(ratio) == 0 && decode_sum("pdserve_decode_requests_running") == 0 &&
                                     MetricValue(scrape("Rq"), waiting) == 0; },
                        std::chrono::seconds(60)))
      << scrape("D1") << scrape("D2") << scrape("Rq");
  // All three counted once each (as aborted, unless one ran to its length
  // before the cancel), the first one surely cancelled.
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(scrape("Rq"), completions) - completions0 == 3; },
                        std::chrono::seconds(60)))
      << scrape("Rq");
  EXPECT_GE(MetricValue(scrape("Rq"), aborted) - aborted0, 1) << scrape("Rq");
  EXPECT_GT(MetricValue(scrape("Rq"), "pdserve_router_itl_seconds_count"), itl0);
}

// After decode worker `name` (D1 or D2) restarted: waits until every router
// that polls both (R, Rl, Rq) places a request on it again (they mark it
// healthy on their next poll that gets through, once their channels stop
// backing off from the failed ones). The other worker is filled meanwhile, so
// a request can only be placed on `name`. Rs never polls and never saw the
// worker fail: its channel reconnects on its next call.
void AwaitRoutersPlaceOn(const std::string& name) {
  const std::string restarted = g_stack->addr[name];
  const std::string other = g_stack->addr[name == "D1" ? "D2" : "D1"];
  const ModelConfig c = E2eConfig();
  const int64_t free = DecodeLoad(other).kv_bytes_free();
  int64_t t = 8;
  while (MixedKVCache::BytesFor(CacheLayout(c), KvDtype::kF32, t + 1) <= free) ++t;
  auto filler = std::make_unique<HandoffAttack>(other, "restart-filler", t - 5);
  // 30 prompt + 20 new tokens: more than the filled worker has left.
  auto probe = IdsRequest(Prompt(30, 77), 20);
  probe.mutable_sampling()->set_ignore_eos(true);
  for (const char* router : {"R", "Rl", "Rq"}) {
    std::string last;
    EXPECT_TRUE(WaitUntil(
        [&] {
          GenerateResult r = Generate(g_stack->addr[router], probe, std::chrono::seconds(3));
          last = r.status.ok() ? "placed on " + r.usage.decode_worker() : r.status.error_message();
          return r.status.ok() && r.usage.decode_worker() == restarted;
        },
        std::chrono::seconds(60)))
        << router << " never placed a request on the restarted " << name << " (" << restarted << "): " << last;
  }
  filler->Cancel();
  filler.reset();
}

// Kills a decode worker mid-stream, and starts it again on its port at the
// end (also when an assertion fails), so every other test finds the whole
// stack in any order (the suite runs under --gtest_shuffle).
TEST_F(ServingE2eTest, KilledDecodeWorkerGivesUnavailableAndTheOtherServes) {
  auto req = IdsRequest(Prompt(10, 6), 3000);
  req.mutable_sampling()->set_ignore_eos(true);
  std::string killed;
  struct RestartKilled {
    std::string* name;
    ~RestartKilled() {
      if (name->empty()) return;
      g_stack->Restart(*name);
      // The routers poll every 100 ms (Rs never, but it never saw the
      // worker fail), through channels that back off reconnecting for up
      // to ~2.6 s after the failed polls: wait that out.
      EXPECT_TRUE(WaitUntil([&] { return DecodeLoad(g_stack->addr[*name]).kv_bytes_free() > 0; },
                            std::chrono::seconds(60)));
      AwaitRoutersPlaceOn(*name);
    }
  } restart{&killed};
  GenerateResult got = Generate(Addr("R"), req, std::chrono::seconds(30), [&](grpc::ClientContext*, auto& r) {
    if (r.ids.size() >= 3 && killed.empty()) {
      for (const char* d : {"D1", "D2"}) {
        if (DecodeLoad(Addr(d)).active_sequences() > 0) {
          killed = d;
          g_stack->procs[d]->Stop(SIGKILL);
          break;
        }
      }
    }
  });
  ASSERT_FALSE(killed.empty());
  // UNAVAILABLE, not the 30 s deadline: the router saw the stream break.
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::UNAVAILABLE) << got.status.error_message();
  const std::string survivor = killed == "D1" ? Addr("D2") : Addr("D1");
  auto next = IdsRequest(Prompt(10, 7), 10);
  GenerateResult after = Generate(Addr("R"), next);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.usage.decode_worker(), survivor);
  EXPECT_EQ(after.ids, Reference(next));
}

}  // namespace
}  // namespace pdserve
