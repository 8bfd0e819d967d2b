// The KV hand-off transfer interface (kv_transfer.h) over both transports:
// a test KvReceiver (tests/kv_test_util.h) reached through an
// InProcessKvRegistry or a real gRPC server on loopback (DecodeWorker.PushKv
// -> NewPushKvReactor), then the same transports into the real receive
// session of a BatchScheduler. The NCCL transport: nccl_kv_transfer_test.cc.
#include "common/net/grpc_status.h"
#include "common/handoff/kv_transfer.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/engine.h"
#include "common/model/weights.h"
#include "common/net/server.h"
#include "decode_service/batch_scheduler.h"
#include "tests/kv_test_util.h"
#include "tests/scheduler_test_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using namespace ::pdserve::testing;  // NOLINT: the shared hand-off fixtures

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return 1;  // nobody listens on port 1 either
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ---- The fixture: one receiver behind either transport ----

class KvTransferTest : public ::testing::TestWithParam<KvTransport> {
 protected:
  KvTransferTest() : config_(testing::TinyConfig()), receiver_(config_) {}

  void SetUp() override {
    if (grpc()) {
      service_ = std::make_unique<TestDecodeService>(&receiver_);
      auto started = StartServer("127.0.0.1:0", {service_.get()});
      ASSERT_TRUE(started.ok()) << started.status();
      server_ = std::move(started->server);
      address_ = "127.0.0.1:" + std::to_string(started->port);
    } else {
      address_ = "decode-0.test:7001";
      registry_.Register(address_, &receiver_);
    }
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }

  bool grpc() const { return GetParam() == KvTransport::kGrpc; }

  std::unique_ptr<KvSender> Sender(int64_t max_chunk_bytes = 256, int64_t max_queued_bytes = int64_t{256} << 20) {
    KvSenderOptions o;
    o.max_chunk_bytes = max_chunk_bytes;
    o.max_queued_bytes = max_queued_bytes;
    o.registry = &registry_;
    return MakeKvSender(GetParam(), config_, o);
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

  // For gRPC the reactor frees its session after the call finished: give it
  // a moment.
  static bool Destroyed(const std::shared_ptr<SessionLog>& log) {
    return WaitFor([&] { return log->Get().destroyed; });
  }

  ModelConfig config_;
  TestReceiver receiver_;
  InProcessKvRegistry registry_;
  std::unique_ptr<TestDecodeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_P(KvTransferTest, RoundTripsEveryLayerInBothDtypes) {
  auto sender = Sender(/*max_chunk_bytes=*/256);
  uint32_t first_token = 41;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    SCOPED_TRACE(dtype == KvDtype::kBF16 ? "bf16" : "f32");
    const size_t before = receiver_.sessions();
    const KvHandoffState sent = MakeState(config_, dtype, kPromptLen, /*seed=*/first_token);
    HandoffResult r = RunHandoff(*sender, address_, MakeHeader(dtype), sent, first_token, Deadline());
    ASSERT_TRUE(r.status.ok()) << r.stage << ": " << r.status;

    ASSERT_EQ(receiver_.sessions(), before + 1);
    auto log = receiver_.last();
    SessionLog::View got = log->Get();
    EXPECT_EQ(got.finish_calls, 1);
    EXPECT_EQ(got.abort_calls, 0) << got.abort_status;
    ASSERT_TRUE(got.state.has_value());

    // Exactly the tensors that were sent, layer by layer.
    EXPECT_EQ(got.state->prompt_len, kPromptLen);
    ASSERT_EQ(got.state->k.size(), static_cast<size_t>(config_.n_layers));
    ASSERT_EQ(got.state->v.size(), static_cast<size_t>(config_.n_layers));
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      EXPECT_EQ(got.state->k[l].sizes(), sent.k[l].sizes()) << "layer " << l;
      EXPECT_EQ(got.state->k[l].scalar_type(), ScalarOf(dtype)) << "layer " << l;
      EXPECT_TRUE(at::equal(got.state->k[l], sent.k[l])) << "K of layer " << l;
      EXPECT_TRUE(at::equal(got.state->v[l], sent.v[l])) << "V of layer " << l;
    }
    EXPECT_EQ(got.state->k[0].size(0), config_.window);  // windowed layer
    EXPECT_EQ(got.state->k[1].size(0), kPromptLen);      // global layer

    // The commit's first token and the caller's header fields, with the
    // layout the sender's transport filled in.
    EXPECT_EQ(got.first_token, first_token);
    EXPECT_EQ(got.header.request_id, "req-1");
    EXPECT_EQ(got.header.layout.model_fingerprint, kFingerprint);
    EXPECT_EQ(got.header.layout.dtype, dtype);
    EXPECT_EQ(got.header.layout.n_layers, config_.n_layers);
    EXPECT_EQ(got.header.layout.window, config_.window);
    EXPECT_EQ(got.header.layout.n_kv_heads, config_.n_kv_heads);
    EXPECT_EQ(got.header.layout.head_dim, config_.head_dim);
    EXPECT_EQ(got.header.prompt_len, kPromptLen);
    EXPECT_EQ(got.header.sampling.seed, 1234u);
    EXPECT_FLOAT_EQ(got.header.sampling.temperature, 0.5f);

    // Stats: every payload byte, in more chunks than layers (256-byte chunks).
    const int64_t total = ExpectedTotalBytes(config_, dtype, kPromptLen);
    EXPECT_EQ(got.header.total_bytes, total);
    EXPECT_EQ(r.stats.bytes, total);
    EXPECT_EQ(r.stats.bytes, got.received_bytes);
    EXPECT_GT(r.stats.chunks, config_.n_layers);
    EXPECT_GT(r.stats.chunks, 2 * config_.n_layers);
    EXPECT_EQ(got.chunks, r.stats.chunks + 2);  // + header + commit
    EXPECT_GT(r.stats.tail_ns, 0);
    EXPECT_GE(r.stats.elapsed_ns, r.stats.tail_ns);

    EXPECT_TRUE(Destroyed(log)) << "receive session not freed after the acknowledgement";
    ++first_token;
  }
}

TEST_P(KvTransferTest, DefaultChunkSizeSendsOneChunkPerTensor) {
  auto sender = Sender(/*max_chunk_bytes=*/kMaxKvChunkBytes);
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 3);
  HandoffResult r =
      RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32), sent, 7, Deadline());
  ASSERT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
  EXPECT_EQ(r.stats.chunks, 2 * config_.n_layers);
  EXPECT_EQ(r.stats.bytes, ExpectedTotalBytes(config_, KvDtype::kF32, kPromptLen));
}

TEST_P(KvTransferTest, ShortPromptCarriesPromptLenRowsEverywhere) {
  // T = 5 < window: every layer carries 5 rows.
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kBF16, 5, 4);
  HandoffResult r =
      RunHandoff(*sender, address_, MakeHeader(KvDtype::kBF16, "short", 5), sent, 0, Deadline());
  ASSERT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
  SessionLog::View got = receiver_.last()->Get();
  ASSERT_TRUE(got.state.has_value());
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    EXPECT_EQ(got.state->k[l].size(0), 5);
    EXPECT_TRUE(at::equal(got.state->v[l], sent.v[l])) << "layer " << l;
  }
  EXPECT_EQ(got.first_token, 0u);
}

TEST_P(KvTransferTest, ConcurrentHandoffsOnOneSenderStayApart) {
  auto sender = Sender(/*max_chunk_bytes=*/512);
  constexpr int kN = 4;
  std::vector<KvHandoffState> sent;
  for (int i = 0; i < kN; ++i) sent.push_back(MakeState(config_, KvDtype::kF32, kPromptLen, 100 + i));
  std::vector<HandoffResult> results(kN);
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      results[i] = RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32, "c" + std::to_string(i)),
                              sent[i], static_cast<uint32_t>(10 + i), Deadline());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << " " << results[i].stage << ": " << results[i].status;
  }
  auto logs = receiver_.logs();
  ASSERT_EQ(logs.size(), static_cast<size_t>(kN));
  int matched = 0;
  for (const auto& log : logs) {
    SessionLog::View got = log->Get();
    ASSERT_TRUE(got.state.has_value());
    const int i = std::stoi(got.header.request_id.substr(1));
    ASSERT_GE(i, 0);
    ASSERT_LT(i, kN);
    EXPECT_EQ(got.first_token, static_cast<uint32_t>(10 + i));
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      EXPECT_TRUE(at::equal(got.state->k[l], sent[i].k[l])) << "request " << i << " layer " << l;
      EXPECT_TRUE(at::equal(got.state->v[l], sent[i].v[l])) << "request " << i << " layer " << l;
    }
    ++matched;
  }
  EXPECT_EQ(matched, kN);
}

TEST_P(KvTransferTest, WrongFingerprintIsRejectedAndTheSessionAborted) {
  KvReceiveLimits limits;
  limits.model_fingerprint = "fp-some-other-model";
  receiver_.set_limits(limits);
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 5);
  HandoffResult r = RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32), sent, 1, Deadline());
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.stage << ": " << r.status;
  EXPECT_TRUE(HasSubstr(r.status, "fingerprint")) << r.status;
  if (grpc()) {
    EXPECT_NE(r.stage, "StartSend") << "gRPC StartSend should not wait for the receiver";
  }

  ASSERT_EQ(receiver_.sessions(), 1u);
  auto log = receiver_.last();
  ASSERT_TRUE(WaitFor([&] { return log->Get().abort_calls > 0; }));
  SessionLog::View got = log->Get();
  EXPECT_EQ(got.abort_calls, 1);
  EXPECT_EQ(got.finish_calls, 0);
  EXPECT_EQ(got.abort_status.code(), absl::StatusCode::kFailedPrecondition) << got.abort_status;
  EXPECT_EQ(got.chunks, 1);  // the header binds the request, then nothing passes the check
  EXPECT_TRUE(Destroyed(log)) << "rejected receive session leaked";
}

TEST_P(KvTransferTest, FirstTokenOutsideVocabIsRejectedAtCommit) {
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 6);
  const uint32_t bad_token = static_cast<uint32_t>(config_.vocab_size);
  HandoffResult r =
      RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32), sent, bad_token, Deadline());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.stage << ": " << r.status;
  EXPECT_EQ(r.stage, "CommitSend");
  EXPECT_TRUE(HasSubstr(r.status, "first_token")) << r.status;

  auto log = receiver_.last();
  ASSERT_NE(log, nullptr);
  ASSERT_TRUE(WaitFor([&] { return log->Get().abort_calls > 0; }));
  SessionLog::View got = log->Get();
  EXPECT_EQ(got.abort_calls, 1);
  EXPECT_EQ(got.finish_calls, 0);
  EXPECT_EQ(got.abort_status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Destroyed(log));
}

TEST_P(KvTransferTest, CancelMidStreamAbortsTheReceiver) {
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 8);
  auto session = sender->StartSend(address_, MakeHeader(KvDtype::kF32), Deadline());
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->SendLayer(0, sent.k[0], sent.v[0]).ok());
  ASSERT_TRUE((*session)->SendLayer(1, sent.k[1], sent.v[1]).ok());
  // Let some chunks reach the receiver, so that the stream is really open there.
  ASSERT_TRUE(WaitFor([&] {
    auto log = receiver_.last();
    return log != nullptr && log->Get().chunks > 1;
  }));
  auto log = receiver_.last();

  (*session)->CancelSend();
  ASSERT_TRUE(WaitFor([&] {
    auto g = log->Get();
    return g.abort_calls + g.finish_calls > 0;
  })) << "the receiver never learned of the cancelled stream";
  SessionLog::View got = log->Get();
  EXPECT_EQ(got.abort_calls, 1);
  EXPECT_EQ(got.finish_calls, 0) << "a cancelled stream was finished, not aborted";
  if (GetParam() == KvTransport::kGrpc) {
    // Over the wire the receiver only sees its stream break: the sender's
    // side failed, and another prefill worker may succeed.
    EXPECT_EQ(got.abort_status.code(), absl::StatusCode::kUnavailable) << got.abort_status;
    EXPECT_EQ(FailedSide(got.abort_status), "prefill");
  } else {
    EXPECT_EQ(got.abort_status.code(), absl::StatusCode::kCancelled) << got.abort_status;
  }
  EXPECT_FALSE(got.state.has_value());
  EXPECT_TRUE(Destroyed(log));

  // Cancelling again is safe; the session is dead.
  (*session)->CancelSend();
  absl::Status after = (*session)->SendLayer(2, sent.k[2], sent.v[2]);
  EXPECT_FALSE(after.ok());
  EXPECT_EQ(after.code(), absl::StatusCode::kCancelled) << after;
  session->reset();
  // The receive session is gone (destroyed above): nothing can call it again,
  // so its counts are final.
  ASSERT_TRUE(Destroyed(log));
  got = log->Get();
  EXPECT_EQ(got.abort_calls, 1) << "aborted more than once";
  EXPECT_EQ(got.finish_calls, 0);
}

TEST_P(KvTransferTest, DroppingAnOpenSessionAbortsTheReceiver) {
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kBF16, kPromptLen, 9);
  {
    auto session = sender->StartSend(address_, MakeHeader(KvDtype::kBF16), Deadline());
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->SendLayer(0, sent.k[0], sent.v[0]).ok());
    ASSERT_TRUE(WaitFor([&] {
      auto log = receiver_.last();
      return log != nullptr && log->Get().chunks > 1;
    }));
  }  // destroyed without CancelSend or CommitSend
  auto log = receiver_.last();
  ASSERT_TRUE(WaitFor([&] {
    auto g = log->Get();
    return g.abort_calls + g.finish_calls > 0;
  }));
  SessionLog::View got = log->Get();
  EXPECT_EQ(got.abort_calls, 1);
  EXPECT_EQ(got.finish_calls, 0);
  EXPECT_TRUE(Destroyed(log));
}

TEST_P(KvTransferTest, CompletedSessionIsNotAbortedByCancelOrDestruction) {
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 10);
  auto session = sender->StartSend(address_, MakeHeader(KvDtype::kF32), Deadline());
  ASSERT_TRUE(session.ok()) << session.status();
  for (int64_t l = 0; l < config_.n_layers; ++l) ASSERT_TRUE((*session)->SendLayer(l, sent.k[l], sent.v[l]).ok());
  auto stats = (*session)->CommitSend(3);
  ASSERT_TRUE(stats.ok()) << stats.status();

  // After the commit the session refuses more work...
  EXPECT_EQ((*session)->CommitSend(3).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*session)->SendLayer(0, sent.k[0], sent.v[0]).code(), absl::StatusCode::kFailedPrecondition);
  // ...and cancelling or dropping it does not take the K/V back.
  (*session)->CancelSend();
  session->reset();
  auto log = receiver_.last();
  // Wait for the receive session's end (it is freed after the acknowledgement):
  // from then on nothing can abort it, so the counts below are final.
  ASSERT_TRUE(Destroyed(log)) << "receive session not freed after the commit";
  SessionLog::View got = log->Get();
  EXPECT_EQ(got.finish_calls, 1);
  EXPECT_EQ(got.abort_calls, 0) << got.abort_status;
  EXPECT_TRUE(got.state.has_value());
}

TEST_P(KvTransferTest, BadLayersAreInvalidArgumentBeforeTheyReachTheWire) {
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kBF16, kPromptLen, 11);
  auto session = sender->StartSend(address_, MakeHeader(KvDtype::kBF16), Deadline());
  ASSERT_TRUE(session.ok()) << session.status();

  // Out of order.
  EXPECT_EQ((*session)->SendLayer(1, sent.k[1], sent.v[1]).code(), absl::StatusCode::kInvalidArgument);
  // Wrong dtype (f32 rows under a bf16 header).
  EXPECT_EQ((*session)->SendLayer(0, sent.k[0].to(at::kFloat), sent.v[0].to(at::kFloat)).code(),
            absl::StatusCode::kInvalidArgument);
  // Wrong row count: layer 0 is windowed (8 rows), not 13.
  EXPECT_EQ((*session)->SendLayer(0, sent.k[1], sent.v[1]).code(), absl::StatusCode::kInvalidArgument);
  // Wrong head count.
  at::Tensor wide = at::zeros({config_.window, config_.n_kv_heads + 1, config_.head_dim}, at::kBFloat16);
  EXPECT_EQ((*session)->SendLayer(0, wide, wide).code(), absl::StatusCode::kInvalidArgument);
  // Commit before the last layer.
  EXPECT_EQ((*session)->CommitSend(1).status().code(), absl::StatusCode::kFailedPrecondition);

  // None of that reached the receiver as data, and the stream still works.
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    ASSERT_TRUE((*session)->SendLayer(l, sent.k[l], sent.v[l]).ok()) << "layer " << l;
  }
  auto stats = (*session)->CommitSend(2);
  ASSERT_TRUE(stats.ok()) << stats.status();
  SessionLog::View got = receiver_.last()->Get();
  ASSERT_TRUE(got.state.has_value());
  for (int64_t l = 0; l < config_.n_layers; ++l) EXPECT_TRUE(at::equal(got.state->k[l], sent.k[l]));
}

TEST_P(KvTransferTest, ReceiverShuttingDownIsUnavailable) {
  receiver_.set_begin_status(absl::UnavailableError("decode worker shutting down"));
  auto sender = Sender();
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 12);
  HandoffResult r = RunHandoff(*sender, address_, MakeHeader(KvDtype::kF32), sent, 1, Deadline());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.stage << ": " << r.status;
  EXPECT_EQ(receiver_.sessions(), 0u);
}

TEST_P(KvTransferTest, UnknownAddressIsUnavailableWithoutHanging) {
  auto sender = Sender();
  const std::string nowhere =
      grpc() ? "127.0.0.1:" + std::to_string(ClosedPort()) : std::string("decode-9.test:7009");
  const KvHandoffState sent = MakeState(config_, KvDtype::kF32, kPromptLen, 13);
  const absl::Time start = absl::Now();
  HandoffResult r = RunHandoff(*sender, nowhere, MakeHeader(KvDtype::kF32), sent, 1,
                               absl::Now() + absl::Seconds(5));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(r.status.ok());
  if (grpc()) {
    EXPECT_TRUE(r.status.code() == absl::StatusCode::kUnavailable ||
                r.status.code() == absl::StatusCode::kDeadlineExceeded)
        << r.stage << ": " << r.status;
  } else {
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_EQ(r.stage, "StartSend");
  }
  EXPECT_TRUE(HasSubstr(r.status, nowhere) || r.status.code() == absl::StatusCode::kDeadlineExceeded) << r.status;
  EXPECT_LT(took, absl::Seconds(8)) << "a hand-off to a dead address took " << took;
  EXPECT_EQ(receiver_.sessions(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, KvTransferTest,
                         ::testing::Values(KvTransport::kInProcess, KvTransport::kGrpc),
                         [](const ::testing::TestParamInfo<KvTransport>& info) {
                           return std::string(info.param == KvTransport::kGrpc ? "Grpc" : "InProcess");
                         });

// ---- gRPC only ----

// One gRPC hand-off whose send queue (max_queued_bytes) holds fewer bytes
// than one layer, so that Deliver must wait for the writer thread mid-layer.
// Returns 0 when everything arrived intact, else prints why and returns 1.
int SmallQueueHandoff(int64_t max_chunk_bytes, int64_t max_queued_bytes) {
  const ModelConfig config = testing::TinyConfig();
  TestReceiver receiver(config);
  TestDecodeService service(&receiver);
  auto started = StartServer("127.0.0.1:0", {&service});
  if (!started.ok()) {
    std::fprintf(stderr, "StartServer: %s\n", started.status().ToString().c_str());
    return 1;
  }
  KvSenderOptions o;
  o.max_chunk_bytes = max_chunk_bytes;
  o.max_queued_bytes = max_queued_bytes;
  auto sender = MakeKvSender(KvTransport::kGrpc, config, o);
  const KvHandoffState sent = MakeState(config, KvDtype::kF32, kPromptLen, 14);
  HandoffResult r = RunHandoff(*sender, "127.0.0.1:" + std::to_string(started->port),
                               MakeHeader(KvDtype::kF32), sent, 5, absl::Now() + absl::Seconds(3));
  if (!r.status.ok()) {
    std::fprintf(stderr, "%s: %s\n", r.stage.c_str(), r.status.ToString().c_str());
    return 1;
  }
  SessionLog::View got = receiver.last()->Get();
  if (!got.state.has_value() || got.first_token != 5 ||
      r.stats.bytes != ExpectedTotalBytes(config, KvDtype::kF32, kPromptLen)) {
    std::fprintf(stderr, "wrong hand-off at the receiver\n");
    return 1;
  }
  for (int64_t l = 0; l < config.n_layers; ++l) {
    if (!at::equal(got.state->k[l], sent.k[l]) || !at::equal(got.state->v[l], sent.v[l])) {
      std::fprintf(stderr, "layer %ld differs\n", static_cast<long>(l));
      return 1;
    }
  }
  return 0;
}

// Backpressure must slow the sender down, never stop it. Run in a child
// process with an alarm, so that a deadlock fails the test in seconds
// instead of hanging the binary (the deadline does not help: a sender
// blocked in Deliver never looks at it).
TEST(GrpcKvTransferTest, SendQueueSmallerThanALayerStillDelivers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Control: the same child with the default queue completes (so a failure
  // below is the queue, not the harness).
  EXPECT_EXIT(
      {
        ::alarm(3);
        std::_Exit(SmallQueueHandoff(/*max_chunk_bytes=*/256, /*max_queued_bytes=*/int64_t{256} << 20));
      },
      ::testing::ExitedWithCode(0), "");
  // Chunks of 256 bytes, a queue of ~3 of them; a layer is 8 or 14 chunks.
  EXPECT_EXIT(
      {
        ::alarm(3);
        std::_Exit(SmallQueueHandoff(/*max_chunk_bytes=*/256, /*max_queued_bytes=*/1024));
      },
      ::testing::ExitedWithCode(0), "")
      << "a gRPC hand-off with max_queued_bytes below one layer did not complete (killed by SIGALRM = "
         "deadlocked in GrpcSendSession::Deliver)";
}

// ---- In-process registry ----

TEST(InProcessKvRegistryTest, RegisterFindUnregister) {
  const ModelConfig config = testing::TinyConfig();
  TestReceiver a(config), b(config);
  InProcessKvRegistry registry;
  EXPECT_EQ(registry.Find("x:1"), nullptr);
  registry.Register("x:1", &a);
  registry.Register("y:2", &b);
  EXPECT_EQ(registry.Find("x:1"), &a);
  EXPECT_EQ(registry.Find("y:2"), &b);
  registry.Register("x:1", &b);  // re-registering replaces
  EXPECT_EQ(registry.Find("x:1"), &b);
  registry.Unregister("x:1");
  EXPECT_EQ(registry.Find("x:1"), nullptr);
  EXPECT_EQ(registry.Find("y:2"), &b);
  registry.Unregister("never-registered");
}

TEST(InProcessKvRegistryTest, SenderUsesItsOwnRegistryNotTheGlobalOne) {
  const ModelConfig config = testing::TinyConfig();
  TestReceiver local(config), global(config);
  InProcessKvRegistry registry;
  registry.Register("local:1", &local);
  InProcessKvRegistry::Global().Register("global:1", &global);
  KvSenderOptions o;
  o.registry = &registry;
  auto sender = MakeKvSender(KvTransport::kInProcess, config, o);
  const KvHandoffState sent = MakeState(config, KvDtype::kF32, kPromptLen, 15);

  HandoffResult r = RunHandoff(*sender, "global:1", MakeHeader(KvDtype::kF32), sent, 1,
                               absl::InfiniteFuture());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(global.sessions(), 0u);

  r = RunHandoff(*sender, "local:1", MakeHeader(KvDtype::kF32), sent, 1, absl::InfiniteFuture());
  EXPECT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
  EXPECT_EQ(local.sessions(), 1u);

  // After Unregister the address is unknown again.
  registry.Unregister("local:1");
  r = RunHandoff(*sender, "local:1", MakeHeader(KvDtype::kF32), sent, 1, absl::InfiniteFuture());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(local.sessions(), 1u);

  // With no registry in the options, the sender finds the Global() one.
  auto global_sender = MakeKvSender(KvTransport::kInProcess, config, KvSenderOptions{});
  r = RunHandoff(*global_sender, "global:1", MakeHeader(KvDtype::kF32), sent, 1,
                 absl::InfiniteFuture());
  EXPECT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
  EXPECT_EQ(global.sessions(), 1u);
  InProcessKvRegistry::Global().Unregister("global:1");
}

// ---- The real receive session: a BatchScheduler behind either transport ----

class SchedulerTransferTest : public ::testing::TestWithParam<KvTransport> {
 protected:
  static void SetUpTestSuite() {
    engine_ = Engine::FromWeights(RandomWeights(testing::TinyConfig(), 3)).release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  void SetUp() override {
    BatchSchedulerOptions o;
    o.model_fingerprint = kFingerprint;
    o.kv_budget_bytes = int64_t{64} << 20;
    scheduler_ = std::make_unique<BatchScheduler>(engine_, o);
    scheduler_->Start();
    if (GetParam() == KvTransport::kGrpc) {
      service_ = std::make_unique<TestDecodeService>(scheduler_.get());
      auto started = StartServer("127.0.0.1:0", {service_.get()});
      ASSERT_TRUE(started.ok()) << started.status();
      server_ = std::move(started->server);
      address_ = "127.0.0.1:" + std::to_string(started->port);
    } else {
      address_ = "decode-0.test:7001";
      registry_.Register(address_, scheduler_.get());
    }
    KvSenderOptions so;
    so.max_chunk_bytes = 256;
    so.registry = &registry_;
    sender_ = MakeKvSender(GetParam(), engine_->config(), so);
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
    scheduler_->Shutdown();
  }

  absl::StatusOr<RequestHandle> Admit(const std::string& id, std::shared_ptr<TokenSink> sink) {
    AdmitRequest r;
    r.request_id = id;
    r.prompt_len = kPromptLen;
    r.max_new_tokens = 4;
    r.ignore_eos = true;
    return scheduler_->Admit(r, std::move(sink));
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

  // The hand-off's buffers and reservations all returned.
  bool Drained() {
    return WaitFor([&] {
      const SchedulerLoad load = scheduler_->Load();
      return load.active_sequences == 0 && load.kv_bytes_used == 0 && load.kv_bytes_allocated == 0;
    });
  }

  static Engine* engine_;
  std::unique_ptr<BatchScheduler> scheduler_;
  InProcessKvRegistry registry_;
  std::unique_ptr<TestDecodeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<KvSender> sender_;
};

Engine* SchedulerTransferTest::engine_ = nullptr;

TEST_P(SchedulerTransferTest, AnAdmittedRequestDecodesFromItsHandoff) {
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Admit("req-1", sink).ok());
  const KvHandoffState sent = MakeState(engine_->config(), KvDtype::kF32, kPromptLen, 5);
  HandoffResult r =
      RunHandoff(*sender_, address_, MakeHeader(KvDtype::kF32), sent, /*first_token=*/17, Deadline());
  ASSERT_TRUE(r.status.ok()) << r.stage << ": " << r.status;
  EXPECT_EQ(r.stats.bytes, ExpectedTotalBytes(engine_->config(), KvDtype::kF32, kPromptLen));
  ASSERT_TRUE(sink->WaitDone());
  ASSERT_TRUE(sink->error().ok()) << sink->error();
  const std::vector<int64_t> tokens = sink->tokens();
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0], 17);  // the commit's first token comes out first
  EXPECT_EQ(sink->finishes().back(), FinishReason::kLength);
  EXPECT_TRUE(Drained());
}

TEST_P(SchedulerTransferTest, AHandoffNoDecodeCallAdmittedIsNotFound) {
  const KvHandoffState sent = MakeState(engine_->config(), KvDtype::kF32, kPromptLen, 6);
  HandoffResult r = RunHandoff(*sender_, address_, MakeHeader(KvDtype::kF32, "stranger"), sent, 1,
                               Deadline());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.stage << ": " << r.status;
  EXPECT_TRUE(Drained());
}

// The request is looked up before the header's own checks count: a
// hand-off for no admission is NotFound (the router retries elsewhere)
// even when it also names another model.
TEST_P(SchedulerTransferTest, NotFoundComesBeforeTheHeadersOwnChecks) {
  const KvHandoffState sent = MakeState(engine_->config(), KvDtype::kF32, kPromptLen, 6);
  KvHandoffHeader header = MakeHeader(KvDtype::kF32, "stranger");
  header.layout.model_fingerprint = "another-model";
  HandoffResult r = RunHandoff(*sender_, address_, header, sent, 1, Deadline());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.stage << ": " << r.status;
  EXPECT_TRUE(Drained());
}

TEST_P(SchedulerTransferTest, AWrongModelFailsTheRequestAndFreesIt) {
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(Admit("req-1", sink).ok());
  // The header names another model: the session has bound the request by
  // then, so the rejection fails it.
  const KvHandoffState sent = MakeState(engine_->config(), KvDtype::kF32, kPromptLen, 7);
  KvHandoffHeader header = MakeHeader(KvDtype::kF32);
  header.layout.model_fingerprint = "another-model";
  HandoffResult r = RunHandoff(*sender_, address_, header, sent, 1, Deadline());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.stage << ": " << r.status;
  ASSERT_TRUE(sink->WaitDone());
  EXPECT_EQ(sink->error().code(), absl::StatusCode::kFailedPrecondition) << sink->error();
  EXPECT_TRUE(sink->tokens().empty());
  EXPECT_TRUE(Drained());
}

TEST_P(SchedulerTransferTest, CancellingMidHandoffFreesTheBuffersAndFailsTheStream) {
  auto sink = std::make_shared<RecordingSink>();
  auto handle = Admit("req-1", sink);
  ASSERT_TRUE(handle.ok());
  const KvHandoffState sent = MakeState(engine_->config(), KvDtype::kF32, kPromptLen, 8);
  auto session = sender_->StartSend(address_, MakeHeader(KvDtype::kF32), Deadline());
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->SendLayer(0, sent.k[0], sent.v[0]).ok());
  // The header arrived: the request holds its hand-off's bytes.
  ASSERT_TRUE(WaitFor([&] { return scheduler_->Load().kv_bytes_allocated > 0; }));
  scheduler_->Cancel(*handle);
  EXPECT_EQ(scheduler_->Load().kv_bytes_allocated, 0);
  absl::Status st;
  for (size_t l = 1; l < sent.k.size() && st.ok(); ++l) st = (*session)->SendLayer(static_cast<int64_t>(l), sent.k[l], sent.v[l]);
  if (st.ok()) st = (*session)->CommitSend(3).status();
  EXPECT_FALSE(st.ok()) << "the hand-off of a cancelled request was acknowledged";
  EXPECT_TRUE(sink->tokens().empty());
  EXPECT_TRUE(Drained());
}

INSTANTIATE_TEST_SUITE_P(Transports, SchedulerTransferTest,
                         ::testing::Values(KvTransport::kGrpc, KvTransport::kInProcess),
                         [](const ::testing::TestParamInfo<KvTransport>& info) {
                           return std::string(info.param == KvTransport::kGrpc ? "Grpc" : "InProcess");
                         });

// ---- ParseKvTransport ----

TEST(ParseKvTransportTest, KnownNames) {
  auto g = ParseKvTransport("grpc");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, KvTransport::kGrpc);
  auto i = ParseKvTransport("inprocess");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(*i, KvTransport::kInProcess);
  // Known in every build: without NCCL it means gRPC (with a warning).
  auto n = ParseKvTransport("nccl");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, KvTransport::kNccl);
}

TEST(ParseKvTransportTest, UnknownNamesAreInvalidArgumentNamingTheValue) {
  for (const std::string name : {"NCCL", "", "in-process", "grpc ", "mpi"}) {
    auto t = ParseKvTransport(name);
    ASSERT_FALSE(t.ok()) << "'" << name << "' accepted";
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    EXPECT_TRUE(HasSubstr(t.status(), "'" + name + "'")) << t.status();
  }
}

}  // namespace
}  // namespace pdserve
