// The NCCL transport where it cannot run NCCL (CPU CI): every way a pair
// fails to form a communicator falls back to gRPC, says why once, and moves
// the same bytes; the decode side's NcclConnect answers and PushKv checks.
// Built only with PDSERVE_HAVE_NCCL. The hand-off over real GPUs:
// tests/gpu/nccl_handoff_gpu_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/handoff/grpc_kv_receiver.h"
#include "common/handoff/nccl_comm.h"
#include "common/handoff/nccl_kv_receiver.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "tests/kv_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using namespace ::pdserve::testing;  // NOLINT: the shared hand-off fixtures
using internal::v1::NcclConnectRequest;
using internal::v1::NcclConnectResponse;

constexpr char kFallback[] = "falling back to gRPC";

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// Makes CudaDeviceCount() report `n` for one test.
class ScopedCudaDevices {
 public:
  explicit ScopedCudaDevices(int n) { SetCudaDeviceCountForTesting(n); }
  ~ScopedCudaDevices() { SetCudaDeviceCountForTesting(-1); }
};

bool MachineHasCuda() {
  std::string why;
  return CudaDeviceCount(&why) > 0;
}

// A decode worker from before NcclConnect existed: PushKv only.
class OldDecodeService final : public internal::v1::DecodeWorker::CallbackService {
 public:
  explicit OldDecodeService(KvReceiver* receiver) : receiver_(receiver) {}
  grpc::ServerReadReactor<KvChunk>* PushKv(grpc::CallbackServerContext* context, PushKvResponse* response) override {
    return NewPushKvReactor(context, receiver_, response);
  }

 private:
  KvReceiver* receiver_;
};

class NcclKvTransferTest : public ::testing::Test {
 protected:
  NcclKvTransferTest() : config_(TinyConfig()), receiver_(config_) {}

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }

  // A decode side on loopback: `nccl` null is a --kv-transport grpc worker.
  void Serve(NcclKvReceiver* nccl, bool old_service = false) {
    if (old_service) {
      old_service_ = std::make_unique<OldDecodeService>(&receiver_);
    } else {
      service_ = std::make_unique<TestDecodeService>(&receiver_, nccl);
    }
    auto started = StartServer("127.0.0.1:0", {old_service ? static_cast<grpc::Service*>(old_service_.get())
                                                           : static_cast<grpc::Service*>(service_.get())});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    address_ = "127.0.0.1:" + std::to_string(started->port);
  }

  // Two hand-offs through one NCCL sender; both must arrive intact over
  // gRPC. Returns what the sender logged.
  std::string TwoHandoffs() {
    KvSenderOptions o;
    o.max_chunk_bytes = 256;
    auto sender = MakeKvSender(KvTransport::kNccl, config_, o);
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 2; ++i) {
      const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 20 + i);
      HandoffResult r = RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32), sent, 7 + i,
                                   absl::Now() + absl::Seconds(20));
      EXPECT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
      EXPECT_EQ(r.stats.bytes, ExpectedTotalBytes(config_, KvDtype::kF32, kPromptLen));
      auto log = receiver_.last();
      if (log == nullptr) {
        ADD_FAILURE() << "nothing arrived";
        continue;
      }
      SessionLog::View got = log->Get();
      EXPECT_EQ(got.finish_calls, 1);
      EXPECT_EQ(got.first_token, static_cast<uint32_t>(7 + i));
      if (!got.state.has_value()) {
        ADD_FAILURE() << "no state at the receiver";
        continue;
      }
      EXPECT_TRUE(SameState(*got.state, sent));
    }
    return ::testing::internal::GetCapturedStderr();
  }

  // Checks that the sender fell back once, for `reason`.
  void ExpectFellBackOnce(const std::string& log, const std::string& reason) {
    EXPECT_EQ(Count(log, kFallback), 1) << "expected one fallback line (once per address):\n" << log;
    EXPECT_NE(log.find("kv hand-off to " + address_ + ": NCCL unavailable ("), std::string::npos) << log;
    EXPECT_NE(log.find(reason), std::string::npos) << "the fallback line should say '" << reason << "':\n" << log;
  }

  // Streams `chunks` into PushKv; returns the call's status.
  grpc::Status Push(const std::vector<KvChunk>& chunks) {
    auto stub = internal::v1::DecodeWorker::NewStub(MakeChannel(address_));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    PushKvResponse ack;
    auto writer = stub->PushKv(&ctx, &ack);
    for (const KvChunk& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  ModelConfig config_;
  TestReceiver receiver_;
  std::unique_ptr<TestDecodeService> service_;
  std::unique_ptr<OldDecodeService> old_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(NcclKvTransferTest, PrefillWithoutCudaDeviceFallsBackToGrpcAndSaysWhy) {
  ScopedCudaDevices none(0);
  auto nccl = MakeNcclKvReceiver();
  Serve(nccl.get());
  ExpectFellBackOnce(TwoHandoffs(), "the prefill worker has no CUDA device");
}

TEST_F(NcclKvTransferTest, DecodeWorkerOnGrpcRefusesAndThePairUsesGrpc) {
  ScopedCudaDevices one(1);  // gets the sender past its own device check
  Serve(/*nccl=*/nullptr);
  ExpectFellBackOnce(TwoHandoffs(), "the decode worker runs --kv-transport grpc");
}

TEST_F(NcclKvTransferTest, DecodeWorkerWithoutNcclConnectIsAFallbackToo) {
  ScopedCudaDevices one(1);
  Serve(nullptr, /*old_service=*/true);
  ExpectFellBackOnce(TwoHandoffs(), "the decode worker does not implement NcclConnect");
}

// Both sides accept, and forming the communicator fails (no GPU to put it
// on): the hand-off still goes through, over gRPC.
TEST_F(NcclKvTransferTest, CommunicatorThatFailsToFormFallsBackToGrpc) {
  if (MachineHasCuda()) GTEST_SKIP() << "needs a machine without a usable GPU (the gpu test covers GPUs)";
  ScopedCudaDevices one(1);
  auto nccl = MakeNcclKvReceiver();
  Serve(nccl.get());
  ExpectFellBackOnce(TwoHandoffs(), "CUDA device 0");
}

TEST(NcclKvReceiverTest, ConnectAnswers) {
  NcclConnectRequest request;
  request.set_nccl_unique_id(std::string(kNcclUniqueIdBytes, 'x'));
  request.set_comm_id("p:1/1");
  request.set_sender_id("p:1");

  NcclConnectResponse grpc_only = AnswerNcclConnect(nullptr, request);
  EXPECT_FALSE(grpc_only.accepted());
  EXPECT_EQ(grpc_only.reason(), "the decode worker runs --kv-transport grpc");

  auto nccl = MakeNcclKvReceiver();
  {
    ScopedCudaDevices none(0);
    NcclConnectResponse r = AnswerNcclConnect(nccl.get(), request);
    EXPECT_FALSE(r.accepted());
    EXPECT_NE(r.reason().find("the decode worker has no CUDA device"), std::string::npos) << r.reason();
  }
  ScopedCudaDevices one(1);
  NcclConnectRequest bad = request;
  bad.set_nccl_unique_id("short");
  NcclConnectResponse r = AnswerNcclConnect(nccl.get(), bad);
  EXPECT_FALSE(r.accepted());
  EXPECT_NE(r.reason().find("5-byte unique id (expected 128)"), std::string::npos) << r.reason();
  EXPECT_FALSE(nccl->Has("p:1/1"));
  EXPECT_TRUE(NcclTransportBuilt());
}

TEST_F(NcclKvTransferTest, HeaderNamingAnUnknownCommunicatorIsFailedPrecondition) {
  auto nccl = MakeNcclKvReceiver();
  Serve(nccl.get());
  internal::v1::KvHeader header = MakeWireHeader(KvDtype::kF32);
  header.set_nccl_comm_id("gone:1/7");
  KvChunkEncoder encoder(config_, header);
  grpc::Status st = Push({encoder.Header()});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("NCCL communicator gone:1/7, which this decode worker does not hold"),
            std::string::npos)
      << st.error_message();
  auto log = receiver_.last();
  ASSERT_NE(log, nullptr);
  ASSERT_TRUE(WaitFor([&] { return log->Get().abort_calls == 1; }));
  EXPECT_EQ(log->Get().abort_status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NcclKvTransferTest, NcclPayloadWithoutACommunicatorIsRejected) {
  Serve(/*nccl=*/nullptr);
  KvChunkEncoder encoder(config_, MakeWireHeader(KvDtype::kF32));
  const KvHandoffState state = MakeState(config_, KvDtype::kF32, kPromptLen, 3);
  auto layer = encoder.Layer(0, state.k[0], state.v[0]);
  ASSERT_TRUE(layer.ok()) << layer.status();
  KvChunk data = (*layer)[0];
  data.mutable_data()->set_nccl_bytes(data.data().payload().size());
  data.mutable_data()->clear_payload();
  grpc::Status st = Push({encoder.Header(), data});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("carries its payload over NCCL but the header names no communicator"),
            std::string::npos)
      << st.error_message();
}

}  // namespace
}  // namespace pdserve
