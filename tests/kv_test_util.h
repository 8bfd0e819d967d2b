// Shared by the KV hand-off transfer tests: a test KvReceiver whose
// sessions record what the transport delivered (header, progress, the
// checked K/V and first token, aborts), a DecodeWorker
// service that serves it over gRPC (and NcclConnect, through an optional
// NcclKvReceiver), and helpers that build and run one hand-off.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/handoff/grpc_kv_receiver.h"
#include "common/handoff/kv_transfer.h"
#include "common/handoff/kv_wire.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "tests/test_util.h"

namespace pdserve::testing {

using internal::v1::KvChunk;
using internal::v1::PushKvResponse;

inline constexpr int64_t kPromptLen = 13;  // > window 8: windowed layers carry 8 rows, global ones 13
inline constexpr char kFingerprint[] = "fp-tiny";

inline bool HasSubstr(const absl::Status& st, const std::string& s) {
  return std::string(st.message()).find(s) != std::string::npos;
}

// ---- The test receiver ----

// What one receive session saw. Written by the transport's thread (the
// caller's for in-process, a gRPC reactor thread for gRPC), read by the test.
struct SessionLog {
  mutable absl::Mutex mu;
  int64_t chunks = 0;  // chunks delivered to the session (header, data, progress, commit)
  int finish_calls = 0;
  int abort_calls = 0;
  absl::Status abort_status;   // AbortReceive's argument
  std::optional<KvHandoffState> state;
  uint32_t first_token = 0;
  KvHandoffHeader header;
  int64_t received_bytes = 0;
  bool destroyed = false;

  // Copies of the fields, under the lock.
  struct View {
    int64_t chunks;
    int finish_calls, abort_calls;
    absl::Status abort_status;
    std::optional<KvHandoffState> state;
    uint32_t first_token;
    KvHandoffHeader header;
    int64_t received_bytes;
    bool destroyed;
  };
  View Get() const {
    absl::MutexLock lock(&mu);
    return View{chunks, finish_calls, abort_calls, abort_status, state, first_token, header, received_bytes, destroyed};
  }
};

class TestReceiveSession final : public KvReceiveSession {
 public:
  explicit TestReceiveSession(std::shared_ptr<SessionLog> log) : log_(std::move(log)) {}
  ~TestReceiveSession() override {
    absl::MutexLock lock(&log_->mu);
    log_->destroyed = true;
  }

  absl::Status ReceiveHeader(const KvHandoffHeader& header, std::shared_ptr<KvReceiveBuffers> buffers) override {
    absl::MutexLock lock(&log_->mu);
    ++log_->chunks;
    log_->header = header;
    return absl::OkStatus();
  }

  void ReceiveProgress() override {
    absl::MutexLock lock(&log_->mu);
    ++log_->chunks;
  }

  absl::StatusOr<KvHandoffAck> FinishReceive(KvHandoffState state, uint32_t first_token) override {
    absl::MutexLock lock(&log_->mu);
    ++log_->finish_calls;
    log_->received_bytes = state.Bytes();
    log_->state = std::move(state);
    log_->first_token = first_token;
    return KvHandoffAck{log_->received_bytes};
  }

  void AbortReceive(const absl::Status& why) override {
    absl::MutexLock lock(&log_->mu);
    ++log_->abort_calls;
    log_->abort_status = why;
  }

 private:
  std::shared_ptr<SessionLog> log_;
};

class TestReceiver final : public KvReceiver {
 public:
  explicit TestReceiver(const ModelConfig& config) : config_(config) { limits_.model_fingerprint = kFingerprint; }

  absl::StatusOr<std::unique_ptr<KvReceiveSession>> BeginReceive() override {
    absl::MutexLock lock(&mu_);
    if (!begin_status_.ok()) return begin_status_;
    auto log = std::make_shared<SessionLog>();
    logs_.push_back(log);
    return std::unique_ptr<KvReceiveSession>(new TestReceiveSession(log));
  }
  const ModelConfig& receive_config() const override { return config_; }
  KvReceiveLimits receive_limits() const override {
    absl::MutexLock lock(&mu_);
    return limits_;
  }

  void set_limits(KvReceiveLimits limits) {
    absl::MutexLock lock(&mu_);
    limits_ = std::move(limits);
  }
  void set_begin_status(absl::Status st) {
    absl::MutexLock lock(&mu_);
    begin_status_ = std::move(st);
  }
  std::vector<std::shared_ptr<SessionLog>> logs() const {
    absl::MutexLock lock(&mu_);
    return logs_;
  }
  size_t sessions() const { return logs().size(); }
  std::shared_ptr<SessionLog> last() const {
    auto l = logs();
    return l.empty() ? nullptr : l.back();
  }

 private:
  const ModelConfig config_;
  mutable absl::Mutex mu_;
  KvReceiveLimits limits_;
  absl::Status begin_status_;
  std::vector<std::shared_ptr<SessionLog>> logs_;
};

// Polls `pred` until it holds or `timeout` passes; returns its last value.
// The deadline is generous (sanitizer builds, a loaded machine): it only
// bounds how long a broken test hangs, never what a passing one must do.
inline bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time end = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > end) return pred();
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// ---- The gRPC side ----

class TestDecodeService final : public internal::v1::DecodeWorker::CallbackService {
 public:
  // `nccl`: answers NcclConnect and receives NCCL payloads; null refuses
  // (a --kv-transport grpc decode worker).
  explicit TestDecodeService(KvReceiver* receiver, NcclKvReceiver* nccl = nullptr)
      : receiver_(receiver), nccl_(nccl) {}
  grpc::ServerReadReactor<KvChunk>* PushKv(grpc::CallbackServerContext* context, PushKvResponse* response) override {
    return NewPushKvReactor(context, receiver_, response, nccl_);
  }
  grpc::ServerUnaryReactor* NcclConnect(grpc::CallbackServerContext* context,
                                        const internal::v1::NcclConnectRequest* request,
                                        internal::v1::NcclConnectResponse* response) override {
    *response = AnswerNcclConnect(nccl_, *request);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  KvReceiver* receiver_;
  NcclKvReceiver* nccl_;
};

// ---- Hand-off helpers ----

inline at::ScalarType ScalarOf(KvDtype d) { return d == KvDtype::kBF16 ? at::kBFloat16 : at::kFloat; }

// A header as the prefill worker sends it (the transport fills total_bytes).
inline KvHandoffHeader MakeHeader(KvDtype dtype, const std::string& request_id = "req-1",
                                  int64_t prompt_len = kPromptLen) {
  KvHandoffHeader h;
  h.request_id = request_id;
  h.layout = KvHandoffLayout::Of(TinyConfig(), dtype, kFingerprint);
  h.prompt_len = prompt_len;
  h.sampling.temperature = 0.5f;
  h.sampling.seed = 1234;
  return h;
}

// The same on the wire, for tests that drive KvChunkEncoder themselves.
inline internal::v1::KvHeader MakeWireHeader(KvDtype dtype) { return KvHeaderToWire(MakeHeader(dtype)); }

inline KvHandoffState MakeState(const ModelConfig& config, KvDtype dtype, int64_t prompt_len, uint64_t seed) {
  at::manual_seed(seed);
  KvHandoffState s;
  s.prompt_len = prompt_len;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const int64_t rows = HandoffRows(config, l, prompt_len);
    s.k.push_back(at::randn({rows, config.n_kv_heads, config.head_dim}).to(ScalarOf(dtype)));
    s.v.push_back(at::randn({rows, config.n_kv_heads, config.head_dim}).to(ScalarOf(dtype)));
  }
  return s;
}

inline int64_t ExpectedTotalBytes(const ModelConfig& config, KvDtype dtype, int64_t prompt_len) {
  const int64_t elem = dtype == KvDtype::kBF16 ? 2 : 4;
  int64_t total = 0;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    total += 2 * HandoffRows(config, l, prompt_len) * config.n_kv_heads * config.head_dim * elem;
  }
  return total;
}

struct HandoffResult {
  absl::Status status;  // the first error, or OK
  std::string stage;    // where it surfaced: StartSend, SendLayer, CommitSend ("" when OK)
  KvTransferStats stats;
};

inline HandoffResult RunHandoff(KvSender& sender, const std::string& address, const KvHandoffHeader& header,
                                const KvHandoffState& state, uint32_t first_token, absl::Time deadline) {
  auto session = sender.StartSend(address, header, deadline);
  if (!session.ok()) return {session.status(), "StartSend", {}};
  for (size_t l = 0; l < state.k.size(); ++l) {
    absl::Status st = (*session)->SendLayer(static_cast<int64_t>(l), state.k[l], state.v[l]);
    if (!st.ok()) return {st, "SendLayer", {}};
  }
  auto stats = (*session)->CommitSend(first_token);
  if (!stats.ok()) return {stats.status(), "CommitSend", {}};
  return {absl::OkStatus(), "", *stats};
}

// Success when `got` holds exactly the tensors of `sent`, layer by layer.
inline ::testing::AssertionResult SameState(const KvHandoffState& got, const KvHandoffState& sent) {
  if (got.prompt_len != sent.prompt_len || got.k.size() != sent.k.size() || got.v.size() != sent.v.size()) {
    return ::testing::AssertionFailure() << "prompt_len " << got.prompt_len << " with " << got.k.size()
                                         << " layers, sent " << sent.prompt_len << " with " << sent.k.size();
  }
  for (size_t l = 0; l < sent.k.size(); ++l) {
    if (!at::equal(got.k[l], sent.k[l]) || !at::equal(got.v[l], sent.v[l])) {
      return ::testing::AssertionFailure() << "layer " << l << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pdserve::testing
