// common/net/server: ServeUntilShutdownSignal serves until SIGTERM, and
// reports a server that cannot start instead of blocking.
#include "common/net/server.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/net/metrics.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

// Before main, so that every thread (gtest's, gRPC's) inherits the mask and
// only sigwait sees the SIGTERM the test sends.
const bool kSignalsBlocked = (BlockShutdownSignals(), true);

ServeOptions Options(const std::string& listen) {
  ServeOptions o;
  o.program = "server_test";
  o.listen = listen;
  o.metrics_host = "127.0.0.1";
  o.metrics_port = -1;
  o.drain_timeout = absl::Seconds(1);
  return o;
}

TEST(ServeUntilShutdownSignalTest, AnAddressItCannotBindIsAnErrorNotAWait) {
  ASSERT_TRUE(kSignalsBlocked);
  MetricsRegistry metrics;
  const absl::Status st = ServeUntilShutdownSignal(Options("256.1.2.3:1"), {}, &metrics);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("256.1.2.3:1"), absl::string_view::npos) << st;
}

TEST(ServeUntilShutdownSignalTest, ServesUntilSigtermThenReturnsOk) {
  ASSERT_TRUE(kSignalsBlocked);
  MetricsRegistry metrics;
  const auto start = std::chrono::steady_clock::now();
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGTERM);
  });
  const absl::Status st = ServeUntilShutdownSignal(Options("127.0.0.1:0"), {}, &metrics);
  killer.join();
  EXPECT_TRUE(st.ok()) << st;
  // It blocked until the signal came.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
}

}  // namespace
}  // namespace pdserve
