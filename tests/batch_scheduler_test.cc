// BatchScheduler without processes or gRPC: admission against the KV
// budget, cancellation by handle, local prefill and the decode steps to a
// finish, and hand-offs received through the in-process transport (the
// real receive session, not a test double).
#include "decode_service/batch_scheduler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/handoff/kv_transfer.h"
#include "common/model/weights.h"
#include "tests/scheduler_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using testing::RecordingSink;

constexpr char kFingerprint[] = "fp-scheduler-test";

std::vector<int64_t> Prompt(int64_t n) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 37 + 11) % 300);
  return p;
}

class BatchSchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = Engine::FromWeights(RandomWeights(testing::TinyConfig(), 7)).release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  std::unique_ptr<BatchScheduler> MakeScheduler(int64_t budget_bytes = int64_t{1} << 30) {
    BatchSchedulerOptions o;
    o.kv_budget_bytes = budget_bytes;
    o.model_fingerprint = kFingerprint;
    return std::make_unique<BatchScheduler>(engine_, o);
  }

  // What a single-process greedy generation of `n` tokens gives.
  static std::vector<int64_t> Reference(const std::vector<int64_t>& prompt, int64_t n) {
    GenerateRequest r;
    r.prompt = prompt;
    r.max_new_tokens = n;
    r.stop_at_eos = false;
    auto out = engine_->Generate(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<int64_t>{};
  }

  static AdmitRequest Request(const std::string& id, int64_t prompt_len, int64_t max_new_tokens) {
    AdmitRequest r;
    r.request_id = id;
    r.prompt_len = prompt_len;
    r.max_new_tokens = max_new_tokens;
    r.ignore_eos = true;
    return r;
  }

  static Engine* engine_;
};

Engine* BatchSchedulerTest::engine_ = nullptr;

TEST_F(BatchSchedulerTest, AdmissionChargesTheBudgetAndRefusesWhatDoesNotFit) {
  auto probe = MakeScheduler();
  const int64_t one = probe->ReservationBytes(10, 10);
  auto s = MakeScheduler(2 * one + one / 2);  // room for two
  auto a = s->Admit(Request("a", 10, 10), std::make_shared<RecordingSink>());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(s->Admit(Request("a", 10, 10), std::make_shared<RecordingSink>()).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->Admit(Request("b", 10, 10), std::make_shared<RecordingSink>()).ok());
  EXPECT_EQ(s->Admit(Request("c", 10, 10), std::make_shared<RecordingSink>()).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Larger than the whole budget: OutOfRange (never fits here, unlike a
  // full budget), naming the bytes, the budget and the flag.
  const absl::Status huge = s->Admit(Request("huge", 2000, 2000), std::make_shared<RecordingSink>()).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kOutOfRange) << huge;
  for (const std::string& part : {absl::StrCat(" needs ", probe->ReservationBytes(2000, 2000), " bytes of KV"),
                                  absl::StrCat("whole KV budget of ", 2 * one + one / 2, " bytes"),
                                  std::string("(2000 prompt + 2000 new tokens)"), std::string("--kv-budget-mb")}) {
    EXPECT_NE(huge.message().find(part), std::string::npos) << part << " in " << huge.message();
  }
  AdmitRequest bad_local = Request("local", 4, 2);
  bad_local.local_prompt = {1, 2, 3};  // 3 ids for prompt_len 4
  EXPECT_EQ(s->Admit(bad_local, std::make_shared<RecordingSink>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  SchedulerLoad load = s->Load();
  EXPECT_EQ(load.active_sequences, 2);
  EXPECT_EQ(load.queued_requests, 2);  // both wait for their K/V
  EXPECT_EQ(load.kv_bytes_used, 2 * one);

  // Cancelling one frees its reservation: the third now fits.
  s->Cancel(*a);
  EXPECT_EQ(s->Load().kv_bytes_used, one);
  EXPECT_TRUE(s->Admit(Request("c", 10, 10), std::make_shared<RecordingSink>()).ok());
}

TEST(KvUsageRatioTest, IsUsedOverBudgetClampedToOne) {
  SchedulerLoad load;
  load.kv_bytes_used = 250;
  EXPECT_DOUBLE_EQ(KvUsageRatio(load, 1000), 0.25);
  EXPECT_DOUBLE_EQ(KvUsageRatio(load, 100), 1.0);
  EXPECT_DOUBLE_EQ(KvUsageRatio(load, 0), 0.0);
  load.kv_bytes_used = 0;
  EXPECT_DOUBLE_EQ(KvUsageRatio(load, 1000), 0.0);
}

// The autoscaling gauges on /metrics follow the reservations: a quarter of
// the budget admitted reads 0.25, and 0 once cancelled; a sequence waiting
// for its K/V is not running.
TEST_F(BatchSchedulerTest, KvUsageRatioGaugeFollowsTheReservations) {
  MetricsRegistry metrics;
  const int64_t one = MakeScheduler()->ReservationBytes(10, 10);
  BatchSchedulerOptions o;
  o.kv_budget_bytes = 4 * one;
  o.model_fingerprint = kFingerprint;
  o.metrics = &metrics;
  auto s = std::make_unique<BatchScheduler>(engine_, o);
  auto has = [&metrics](const std::string& line) { return metrics.Render().find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("pdserve_decode_kv_usage_ratio 0")) << metrics.Render();
  auto a = s->Admit(Request("a", 10, 10), std::make_shared<RecordingSink>());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(has("pdserve_decode_kv_usage_ratio 0.25")) << metrics.Render();
  EXPECT_TRUE(has("pdserve_decode_requests_running 0")) << metrics.Render();
  s->Cancel(*a);
  EXPECT_TRUE(has("pdserve_decode_kv_usage_ratio 0")) << metrics.Render();
  s.reset();  // before `metrics`, which holds its gauges
}

TEST_F(BatchSchedulerTest, CancelNamesOneAdmissionNotAnId) {
  auto s = MakeScheduler();
  auto first = s->Admit(Request("x", 5, 5), std::make_shared<RecordingSink>());
  ASSERT_TRUE(first.ok());
  s->Cancel(*first);
  EXPECT_EQ(s->Load().active_sequences, 0);
  auto second = s->Admit(Request("x", 5, 5), std::make_shared<RecordingSink>());
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->serial, first->serial);
  s->Cancel(*first);  // a late cleanup of the first admission
  EXPECT_EQ(s->Load().active_sequences, 1) << "a stale handle cancelled the request that reused its id";
  s->Cancel(*second);
  EXPECT_EQ(s->Load().active_sequences, 0);
  EXPECT_EQ(s->Load().kv_bytes_used, 0);
}

TEST_F(BatchSchedulerTest, LocalPrefillStepsToLengthLikeTheEngine) {
  auto s = MakeScheduler();
  s->Start();
  const std::vector<int64_t> prompt = Prompt(12);
  AdmitRequest r = Request("local", 12, 6);
  r.local_prompt = prompt;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(s->Admit(r, sink).ok());
  ASSERT_TRUE(sink->WaitDone());
  ASSERT_TRUE(sink->error().ok()) << sink->error();
  EXPECT_EQ(sink->tokens(), Reference(prompt, 6));
  const std::vector<FinishReason> f = sink->finishes();
  ASSERT_EQ(f.size(), 6u);
  for (size_t i = 0; i + 1 < f.size(); ++i) EXPECT_EQ(f[i], FinishReason::kNone) << i;
  EXPECT_EQ(f.back(), FinishReason::kLength);
  const SchedulerLoad load = s->Load();
  EXPECT_EQ(load.active_sequences, 0);
  EXPECT_EQ(load.kv_bytes_used, 0);
  EXPECT_EQ(load.kv_bytes_allocated, 0);
  EXPECT_GE(load.decode_steps, 5);
  s->Shutdown();
}

// The model's EOS ends a sequence (the first token included) with kEos,
// unless the request ignores it. The EOS id is a token the model really
// generates: same weights, only eos_token_id set.
TEST_F(BatchSchedulerTest, EosEndsASequenceUnlessIgnored) {
  const std::vector<int64_t> prompt = Prompt(12);
  const std::vector<int64_t> ref = Reference(prompt, 8);
  ASSERT_EQ(ref.size(), 8u);
  // The first token that was not generated before: EOS there ends the
  // sequence after exactly k + 1 tokens.
  size_t k = 1;
  while (k < ref.size() && std::find(ref.begin(), ref.begin() + k, ref[k]) != ref.begin() + k) ++k;
  ASSERT_LT(k, ref.size()) << "the reference repeats one token; pick another prompt";
  for (const bool in_list : {false, true}) {  // eos_token_id, or one of stop_token_ids
    ModelConfig config = testing::TinyConfig();
    if (in_list) {
      config.eos_token_id.reset();
      config.stop_token_ids = {ref[k]};
    } else {
      config.eos_token_id = ref[k];
    }
    std::unique_ptr<Engine> engine = Engine::FromWeights(RandomWeights(config, 7));
    BatchSchedulerOptions o;
    o.model_fingerprint = kFingerprint;
    BatchScheduler s(engine.get(), o);
    s.Start();
    for (bool ignore_eos : {false, true}) {
      SCOPED_TRACE(absl::StrCat(ignore_eos ? "ignore_eos" : "stops at eos", in_list ? ", stop_token_ids" : ""));
      AdmitRequest r = Request(ignore_eos ? "ignoring" : "stopping", 12, 8);
      r.ignore_eos = ignore_eos;
      r.local_prompt = prompt;
      auto sink = std::make_shared<RecordingSink>();
      ASSERT_TRUE(s.Admit(r, sink).ok());
      ASSERT_TRUE(sink->WaitDone());
      ASSERT_TRUE(sink->error().ok()) << sink->error();
      const std::vector<int64_t> want(ref.begin(), ignore_eos ? ref.end() : ref.begin() + k + 1);
      EXPECT_EQ(sink->tokens(), want);
      EXPECT_EQ(sink->finishes().back(), ignore_eos ? FinishReason::kLength : FinishReason::kEos);
    }
    EXPECT_EQ(s.Load().kv_bytes_used, 0);
    s.Shutdown();
  }
}

class HandoffTest : public BatchSchedulerTest {
 protected:
  void SetUp() override {
    scheduler_ = MakeScheduler();
    scheduler_->Start();
    registry_.Register("decode-0", scheduler_.get());
    KvSenderOptions o;
    o.registry = &registry_;
    o.max_chunk_bytes = 512;  // several chunks per layer
    sender_ = MakeKvSender(KvTransport::kInProcess, engine_->config(), o);
  }
  void TearDown() override {
    registry_.Unregister("decode-0");
    scheduler_->Shutdown();
  }

  static KvHandoffHeader Header(const std::string& id, int64_t prompt_len, const std::string& fp) {
    KvHandoffHeader h;
    h.request_id = id;
    h.layout = KvHandoffLayout::Of(engine_->config(), KvDtype::kF32, fp);
    h.prompt_len = prompt_len;
    return h;
  }

  // Prefills `prompt` here and sends its K/V and first token under `header`.
  absl::Status Send(const std::vector<int64_t>& prompt, const KvHandoffHeader& header) {
    auto seq = engine_->NewSequence();
    auto logits = engine_->Prefill(seq.get(), prompt);
    if (!logits.ok()) return logits.status();
    auto state = seq->cache.Export(seq->pos);
    if (!state.ok()) return state.status();
    auto session = sender_->StartSend("decode-0", header, absl::Now() + absl::Seconds(30));
    if (!session.ok()) return session.status();
    for (size_t l = 0; l < state->k.size(); ++l) {
      absl::Status st = (*session)->SendLayer(static_cast<int64_t>(l), state->k[l], state->v[l]);
      if (!st.ok()) return st;
    }
    const auto first = static_cast<uint32_t>(engine_->Sample(*logits, {}, 0));
    return (*session)->CommitSend(first).status();
  }

  InProcessKvRegistry registry_;
  std::unique_ptr<BatchScheduler> scheduler_;
  std::unique_ptr<KvSender> sender_;
};

TEST_F(HandoffTest, AReceivedHandoffDecodesLikeTheEngine) {
  const std::vector<int64_t> prompt = Prompt(13);  // > window: the rings wrap
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Admit(Request("h", 13, 5), sink).ok());
  ASSERT_TRUE(Send(prompt, Header("h", 13, kFingerprint)).ok());
  ASSERT_TRUE(sink->WaitDone());
  ASSERT_TRUE(sink->error().ok()) << sink->error();
  EXPECT_EQ(sink->tokens(), Reference(prompt, 5));
  EXPECT_EQ(sink->finishes().back(), FinishReason::kLength);
  EXPECT_EQ(scheduler_->Load().kv_bytes_used, 0);
}

TEST_F(HandoffTest, AHandoffForNoAdmissionIsNotFound) {
  absl::Status st = Send(Prompt(13), Header("nobody", 13, kFingerprint));
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(scheduler_->Load().active_sequences, 0);
}

TEST_F(HandoffTest, AWrongModelFailsTheAdmittedRequestAndFreesIt) {
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Admit(Request("w", 13, 5), sink).ok());
  absl::Status st = Send(Prompt(13), Header("w", 13, "another-model"));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  ASSERT_TRUE(sink->WaitDone());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kFailedPrecondition) << sink->error();
  EXPECT_TRUE(sink->tokens().empty());
  const SchedulerLoad load = scheduler_->Load();
  EXPECT_EQ(load.active_sequences, 0);
  EXPECT_EQ(load.kv_bytes_used, 0);
  EXPECT_EQ(load.kv_bytes_allocated, 0);
}

TEST_F(HandoffTest, ACancelledRequestRejectsItsLateHandoff) {
  auto sink = std::make_shared<RecordingSink>();
  auto handle = scheduler_->Admit(Request("late", 13, 5), sink);
  ASSERT_TRUE(handle.ok());
  scheduler_->Cancel(*handle);
  absl::Status st = Send(Prompt(13), Header("late", 13, kFingerprint));
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_TRUE(sink->tokens().empty());
  EXPECT_EQ(scheduler_->Load().kv_bytes_allocated, 0);
}

}  // namespace
}  // namespace pdserve
