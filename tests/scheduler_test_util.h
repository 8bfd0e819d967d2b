// Shared by the tests that drive a BatchScheduler in process: a TokenSink
// that records what one request received.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "decode_service/batch_scheduler.h"

namespace pdserve::testing {

// Records what the scheduler sends one request.
class RecordingSink final : public TokenSink {
 public:
  void OnTokens(const std::vector<uint32_t>& ids, FinishReason finish) override {
    absl::MutexLock lock(&mu_);
    for (uint32_t id : ids) tokens_.push_back(id);
    finishes_.push_back(finish);
    if (finish != FinishReason::kNone) done_ = true;
  }
  void OnError(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    error_ = status;
    done_ = true;
  }
  // False when nothing ended within `timeout`.
  bool WaitDone(absl::Duration timeout = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }
  std::vector<int64_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  std::vector<FinishReason> finishes() {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<FinishReason> finishes_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pdserve::testing
