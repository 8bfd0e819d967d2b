// PrefillService in one process: a tiny checkpoint written to disk and
// loaded, the service on a loopback gRPC server, and its hand-offs going
// through the in-process transport into a real BatchScheduler. Checks the
// first token, the hand-off the decode side decodes from, the refusals
// (decode side marked as the failed side, forbidden decode address, bad
// prompt), the queue: its bound, a caller that leaves while queued, and
// shutdown; and queued prompts prefilled together in one forward. The
// queue and batch tests start no executor until they choose to, so prompts
// stay queued.
#include "prefill_service/prefill_service.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/model/checkpoint.h"
#include "common/model/weights.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "decode_service/batch_scheduler.h"
#include "tests/scheduler_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using testing::RecordingSink;

constexpr char kFingerprint[] = "fp-prefill-test";
constexpr char kDecode[] = "decode-0";

std::vector<int64_t> Prompt(int64_t n) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 53 + 5) % 300);
  return p;
}

// Waits, up to 30 s, for `done` to hold; false if it never did.
template <typename F>
bool PollUntil(F done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A Prefill call in flight through the callback client API.
struct PendingPrefill {
  grpc::ClientContext ctx;
  internal::v1::PrefillRequest request;
  internal::v1::PrefillResponse response;
  grpc::Status status;
  absl::Notification done;
};

class PrefillServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SaveCheckpoint(RandomWeights(testing::TinyConfig(), 11), dir_.path(), StDtype::kF32).ok());
    auto engine = Engine::Load(dir_.path());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);

    BatchSchedulerOptions so;
    so.model_fingerprint = kFingerprint;
    so.handoff_timeout = handoff_timeout_;
    scheduler_ = std::make_unique<BatchScheduler>(engine_.get(), so);
    scheduler_->Start();
    registry_.Register(kDecode, scheduler_.get());
    KvSenderOptions ko;
    ko.registry = &registry_;
    sender_ = MakeKvSender(KvTransport::kInProcess, engine_->config(), ko);

    PrefillServiceOptions po;
    po.model_fingerprint = kFingerprint;
    po.allowed_decode_addresses = {kDecode};
    po.max_queue = max_queue_;
    service_ = std::make_unique<PrefillService>(engine_.get(), sender_.get(), po);
    if (start_executors_) service_->Start();
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = internal::v1::PrefillWorker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(started->port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    // The service first: it finishes the prompts still queued, which the
    // server's shutdown would otherwise wait for.
    if (service_ != nullptr) service_->Shutdown();
    for (const auto& p : pending_) {
      if (!p->done.WaitForNotificationWithTimeout(absl::Seconds(30))) p->ctx.TryCancel();
      p->done.WaitForNotification();
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
    registry_.Unregister(kDecode);
    if (scheduler_ != nullptr) scheduler_->Shutdown();
  }

  static internal::v1::PrefillRequest MakeRequest(const std::string& id, const std::vector<int64_t>& prompt,
                                                  const std::string& decode) {
    internal::v1::PrefillRequest r;
    r.set_request_id(id);
    for (int64_t t : prompt) r.add_token_ids(static_cast<uint32_t>(t));
    r.mutable_sampling()->set_max_new_tokens(4);
    r.set_decode_address(decode);
    return r;
  }

  // Starts a Prefill that returns at once; `deadline` from now. The fixture
  // owns the call until TearDown has seen it end.
  PendingPrefill* StartPrefill(const std::string& id, absl::Duration deadline = absl::Seconds(30),
                               const std::vector<int64_t>& prompt = Prompt(9)) {
    pending_.push_back(std::make_unique<PendingPrefill>());
    PendingPrefill* p = pending_.back().get();
    p->request = MakeRequest(id, prompt, kDecode);
    p->ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    stub_->async()->Prefill(&p->ctx, &p->request, &p->response, [p](grpc::Status st) {
      p->status = std::move(st);
      p->done.Notify();
    });
    return p;
  }

  // The prefill worker's GetLoad; queued_requests = -1 when the call failed.
  int64_t Queued() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    internal::v1::GetLoadRequest req;
    internal::v1::GetLoadResponse resp;
    grpc::Status st = stub_->GetLoad(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return st.ok() ? static_cast<int64_t>(resp.queued_requests()) : -1;
  }

  bool QueuedBecomes(int64_t n) {
    return PollUntil([&] { return Queued() == n; });
  }

  grpc::Status Prefill(const std::string& id, const std::vector<int64_t>& prompt, const std::string& decode,
                       internal::v1::PrefillResponse* response, std::string* failed_side = nullptr) {
    internal::v1::PrefillRequest r = MakeRequest(id, prompt, decode);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status st = stub_->Prefill(&ctx, r, response);
    if (failed_side != nullptr) *failed_side = FailedSide(ctx);
    return st;
  }

  absl::StatusOr<RequestHandle> Admit(const std::string& id, int64_t prompt_len, std::shared_ptr<TokenSink> sink) {
    AdmitRequest a;
    a.request_id = id;
    a.prompt_len = prompt_len;
    a.max_new_tokens = 4;
    a.ignore_eos = true;
    return scheduler_->Admit(a, std::move(sink));
  }

  std::vector<int64_t> Reference(const std::vector<int64_t>& prompt, int64_t n) const {
    GenerateRequest r;
    r.prompt = prompt;
    r.max_new_tokens = n;
    r.stop_at_eos = false;
    auto out = engine_->Generate(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : std::vector<int64_t>{};
  }

  // Set by a derived fixture's constructor, read by SetUp.
  bool start_executors_ = true;
  int max_queue_ = 16;
  absl::Duration handoff_timeout_ = absl::Seconds(60);

  testing::TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<BatchScheduler> scheduler_;
  InProcessKvRegistry registry_;
  std::unique_ptr<KvSender> sender_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<internal::v1::PrefillWorker::Stub> stub_;
  std::vector<std::unique_ptr<PendingPrefill>> pending_;
};

TEST_F(PrefillServiceTest, PrefillsAndHandsOffWhatTheDecodeSideContinues) {
  const std::vector<int64_t> prompt = Prompt(21);  // > window: the rings wrap
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Admit("r1", 21, sink).ok());
  internal::v1::PrefillResponse response;
  grpc::Status st = Prefill("r1", prompt, kDecode, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::vector<int64_t> want = Reference(prompt, 4);
  EXPECT_EQ(response.first_token(), static_cast<uint32_t>(want[0]));
  EXPECT_GT(response.kv_handoff_bytes(), 0u);
  ASSERT_TRUE(sink->WaitDone());
  ASSERT_TRUE(sink->error().ok()) << sink->error();
  EXPECT_EQ(sink->tokens(), want);
}

TEST_F(PrefillServiceTest, ADecodeSideRefusalIsMarkedAsTheDecodeSide) {
  internal::v1::PrefillResponse response;
  std::string side;
  grpc::Status st = Prefill("never-admitted", Prompt(9), kDecode, &response, &side);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_EQ(side, "decode");
}

TEST_F(PrefillServiceTest, AnUnlistedDecodeAddressIsPermissionDenied) {
  internal::v1::PrefillResponse response;
  grpc::Status st = Prefill("r2", Prompt(9), "somewhere-else:1", &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
}

TEST_F(PrefillServiceTest, IdsOutsideTheVocabularyAreInvalid) {
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Admit("r3", 3, sink).ok());
  internal::v1::PrefillResponse response;
  grpc::Status st = Prefill("r3", {1, 2, 300}, kDecode, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
}

// No executor runs: every accepted prompt stays queued until the test
// starts one or shuts the service down.
class PrefillQueueTest : public PrefillServiceTest {
 protected:
  PrefillQueueTest() {
    start_executors_ = false;
    max_queue_ = 2;
    handoff_timeout_ = absl::Seconds(6);
  }
};

TEST_F(PrefillQueueTest, APromptBeyondTheBoundIsResourceExhausted) {
  PendingPrefill* a = StartPrefill("q1");
  PendingPrefill* b = StartPrefill("q2");
  ASSERT_TRUE(QueuedBecomes(2));
  internal::v1::PrefillResponse response;
  grpc::Status st = Prefill("q3", Prompt(9), kDecode, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("prefill queue full (2 prompts waiting)"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(Queued(), 2);
  EXPECT_FALSE(a->done.HasBeenNotified());
  EXPECT_FALSE(b->done.HasBeenNotified());
}

TEST_F(PrefillQueueTest, ShutdownFailsQueuedPromptsWithUnavailable) {
  PendingPrefill* a = StartPrefill("s1");
  PendingPrefill* b = StartPrefill("s2");
  ASSERT_TRUE(QueuedBecomes(2));
  service_->Shutdown();
  for (PendingPrefill* p : {a, b}) {
    ASSERT_TRUE(p->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(p->status.error_code(), grpc::StatusCode::UNAVAILABLE) << p->status.error_message();
  }
  EXPECT_EQ(Queued(), 0);
  internal::v1::PrefillResponse response;
  EXPECT_EQ(Prefill("s3", Prompt(9), kDecode, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// What a queued prompt whose caller left does: it leaves the queue (and its
// slot) at the next call, though no executor ran. The prefill worker never
// opened the hand-off, so it does not free the decode side's reservation:
// the scheduler's hand-off timeout does, and fails the sink with
// UNAVAILABLE (in the system the router also cancels its Decode call).
void ExpectALeftCallerLeavesTheQueue(PendingPrefill* left, grpc::StatusCode want, absl::Time admitted,
                                     absl::Duration handoff_timeout, testing::RecordingSink* sink,
                                     BatchScheduler* scheduler) {
  ASSERT_TRUE(left->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(left->status.error_code(), want) << left->status.error_message();
  const int64_t held = scheduler->Load().active_sequences;
  // Only claimed when the hand-off timeout cannot have passed yet.
  if (absl::Now() - admitted < handoff_timeout / 2) {
    EXPECT_EQ(held, 1);
  }
  ASSERT_TRUE(sink->WaitDone());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kUnavailable) << sink->error();
  EXPECT_TRUE(sink->tokens().empty());
  ASSERT_TRUE(PollUntil([&] { return scheduler->Load().active_sequences == 0; }));
  EXPECT_EQ(scheduler->Load().kv_bytes_used, 0);
}

TEST_F(PrefillQueueTest, ACancelledQueuedPromptLeavesTheQueue) {
  auto sink = std::make_shared<RecordingSink>();
  const absl::Time admitted = absl::Now();
  ASSERT_TRUE(Admit("c1", 9, sink).ok());
  EXPECT_GT(scheduler_->Load().kv_bytes_used, 0);
  PendingPrefill* kept = StartPrefill("c0");
  PendingPrefill* left = StartPrefill("c1");
  ASSERT_TRUE(QueuedBecomes(2));
  left->ctx.TryCancel();
  ASSERT_TRUE(QueuedBecomes(1));  // the cancelled one is gone; the other stays
  EXPECT_FALSE(kept->done.HasBeenNotified());
  ExpectALeftCallerLeavesTheQueue(left, grpc::StatusCode::CANCELLED, admitted, handoff_timeout_, sink.get(),
                                  scheduler_.get());
}

TEST_F(PrefillQueueTest, AnExpiredQueuedPromptLeavesTheQueueAndFreesItsSlot) {
  auto sink = std::make_shared<RecordingSink>();
  const absl::Time admitted = absl::Now();
  ASSERT_TRUE(Admit("d1", 9, sink).ok());
  PendingPrefill* kept = StartPrefill("d0");
  PendingPrefill* left = StartPrefill("d1", absl::Milliseconds(1500));
  ASSERT_TRUE(QueuedBecomes(2));  // the queue is at its bound
  ASSERT_TRUE(left->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(QueuedBecomes(1));  // the expired one is gone, the other stays
  // Its slot is free again: a new prompt is queued, not refused.
  PendingPrefill* next = StartPrefill("d2");
  ASSERT_TRUE(QueuedBecomes(2));
  EXPECT_FALSE(next->done.HasBeenNotified());
  EXPECT_FALSE(kept->done.HasBeenNotified());
  ExpectALeftCallerLeavesTheQueue(left, grpc::StatusCode::DEADLINE_EXCEEDED, admitted, handoff_timeout_,
                                  sink.get(), scheduler_.get());
}

// Prompts queued together are prefilled in one forward (their tokens fit
// --prefill-batch-tokens): each still gets its own first token and hand-off,
// with the bits of its prefill alone, and a decode-side refusal fails only
// its own prompt. The prompt that does not fit waits for the next forward.
class PrefillBatchTest : public PrefillServiceTest {
 protected:
  PrefillBatchTest() {
    start_executors_ = false;
    max_queue_ = 8;
  }
};

TEST_F(PrefillBatchTest, QueuedPromptsShareAForwardAndKeepTheirOwnTokens) {
  const std::vector<std::vector<int64_t>> prompts = {Prompt(9), Prompt(12), Prompt(1), Prompt(7), Prompt(20)};
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<PendingPrefill*> calls;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "b" + std::to_string(i);
    sinks.push_back(std::make_shared<RecordingSink>());
    if (i != 3) {
      ASSERT_TRUE(Admit(id, static_cast<int64_t>(prompts[i].size()), sinks.back()).ok());
    }
    calls.push_back(StartPrefill(id, absl::Seconds(30), prompts[i]));
    ASSERT_TRUE(QueuedBecomes(static_cast<int64_t>(i) + 1));
  }
  service_->Start();  // 9 + 12 + 1 + 7 = 29 tokens fit 32; the 20-token prompt does not
  for (size_t i = 0; i < prompts.size(); ++i) {
    PendingPrefill* p = calls[i];
    ASSERT_TRUE(p->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    if (i == 3) {  // never admitted on the decode side
      EXPECT_EQ(p->status.error_code(), grpc::StatusCode::NOT_FOUND) << p->status.error_message();
      continue;
    }
    ASSERT_TRUE(p->status.ok()) << i << ": " << p->status.error_message();
    EXPECT_EQ(p->response.batch_prompts(), i == 4 ? 1u : 3u) << i;
    const std::vector<int64_t> want = Reference(prompts[i], 4);
    EXPECT_EQ(p->response.first_token(), static_cast<uint32_t>(want[0])) << i;
    ASSERT_TRUE(sinks[i]->WaitDone());
    ASSERT_TRUE(sinks[i]->error().ok()) << i << ": " << sinks[i]->error();
    EXPECT_EQ(sinks[i]->tokens(), want) << i;
  }
  EXPECT_EQ(calls[0]->response.prefill_ns(), calls[1]->response.prefill_ns());
}

}  // namespace
}  // namespace pdserve
