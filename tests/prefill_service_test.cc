// PrefillService in one process: a tiny checkpoint written to disk and
// loaded, the service on a loopback gRPC server, and its hand-offs going
// through the in-process transport into a real BatchScheduler. Checks the
// first token, the hand-off the decode side decodes from, and the refusals
// (decode side marked as the failed side, forbidden decode address, bad
// prompt).
#include "prefill_service/prefill_service.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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

class PrefillServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SaveCheckpoint(RandomWeights(testing::TinyConfig(), 11), dir_.path(), StDtype::kF32).ok());
    auto engine = Engine::Load(dir_.path());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);

    BatchSchedulerOptions so;
    so.model_fingerprint = kFingerprint;
    scheduler_ = std::make_unique<BatchScheduler>(engine_.get(), so);
    scheduler_->Start();
    registry_.Register(kDecode, scheduler_.get());
    KvSenderOptions ko;
    ko.registry = &registry_;
    sender_ = MakeKvSender(KvTransport::kInProcess, engine_->config(), ko);

    PrefillServiceOptions po;
    po.model_fingerprint = kFingerprint;
    po.allowed_decode_addresses = {kDecode};
    service_ = std::make_unique<PrefillService>(engine_.get(), sender_.get(), po);
    service_->Start();
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = internal::v1::PrefillWorker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(started->port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
    if (service_ != nullptr) service_->Shutdown();
    registry_.Unregister(kDecode);
    if (scheduler_ != nullptr) scheduler_->Shutdown();
  }

  grpc::Status Prefill(const std::string& id, const std::vector<int64_t>& prompt, const std::string& decode,
                       internal::v1::PrefillResponse* response, std::string* failed_side = nullptr) {
    internal::v1::PrefillRequest r;
    r.set_request_id(id);
    for (int64_t t : prompt) r.add_token_ids(static_cast<uint32_t>(t));
    r.mutable_sampling()->set_max_new_tokens(4);
    r.set_decode_address(decode);
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

  testing::TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<BatchScheduler> scheduler_;
  InProcessKvRegistry registry_;
  std::unique_ptr<KvSender> sender_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<internal::v1::PrefillWorker::Stub> stub_;
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

}  // namespace
}  // namespace pdserve
