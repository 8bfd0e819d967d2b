// RouterHttpOptions (router/router_http.h), the HTTP front door's options
// of pdserve-router and pdserve-local: what it passes through, and a
// /health that follows both worker pools live (real WorkerPools polling
// in-process gRPC workers on loopback).
#include "router/router_http.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "tests/fake_worker.h"

namespace pdserve {
namespace {

// FakeWorker passes the pool's two checks: gRPC's default health service
// (SERVING) and a GetLoad that answers OK.
using testing::FakeWorker;

WorkerPoolOptions PollOnDemand(std::vector<std::string> addresses) {
  WorkerPoolOptions o;
  o.addresses = std::move(addresses);
  o.rpc_timeout = absl::Seconds(5);
  return o;
}

TEST(RouterHttpOptionsTest, PassesProgramModelMetricsAndSecurityThrough) {
  ModelConfig config;
  MetricsRegistry metrics;
  SecurityOptions security;
  security.api_key = "k3y";
  security.cert_file = "/certs/tls.crt";
  WorkerPool prefill(WorkerKind::kPrefill, PollOnDemand({}));
  WorkerPool decode(WorkerKind::kDecode, PollOnDemand({}));
  const OpenAiHttpOptions o = RouterHttpOptions("pdserve-x", &config, &prefill, &decode, &metrics, security);
  EXPECT_EQ(o.program, "pdserve-x");
  EXPECT_EQ(o.config, &config);
  EXPECT_EQ(o.metrics, &metrics);
  EXPECT_EQ(o.security.api_key, "k3y");
  EXPECT_EQ(o.security.cert_file, "/certs/tls.crt");
  EXPECT_EQ(o.channel, nullptr);  // the caller's: the router's in-process channel
  EXPECT_TRUE(o.health != nullptr);
}

TEST(RouterHttpOptionsTest, HealthFollowsBothPoolsLive) {
  FakeWorker<internal::v1::PrefillWorker::CallbackService> p;
  FakeWorker<internal::v1::DecodeWorker::CallbackService> d;
  WorkerPool prefill(WorkerKind::kPrefill, PollOnDemand({p.address()}));
  WorkerPool decode(WorkerKind::kDecode, PollOnDemand({d.address()}));
  ModelConfig config;
  const OpenAiHttpOptions o = RouterHttpOptions("t", &config, &prefill, &decode, nullptr, {});

  // Built before any poll: nobody healthy yet, prefill named first.
  absl::Status st = o.health();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "no healthy prefill worker");
  prefill.PollNow();
  st = o.health();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "no healthy decode worker");
  decode.PollNow();
  EXPECT_TRUE(o.health().ok()) << o.health();
}

}  // namespace
}  // namespace pdserve
