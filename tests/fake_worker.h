// A fake prefill or decode worker for router tests: a real gRPC server on
// loopback with gRPC's default health service (status settable) and a
// GetLoad that answers a settable load (default: an empty OK response) or
// holds calls unanswered (a hung worker) until Release().
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve::testing {

// GetLoad answers a settable load, or holds the call unanswered (a hung
// worker) until Release().
template <typename Service>
class FakeService final : public Service {
 public:
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const internal::v1::GetLoadRequest*,
                                    internal::v1::GetLoadResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    if (hang_) {
      held_.push_back(reactor);
      return reactor;
    }
    *response = load_;
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  void SetLoad(const internal::v1::GetLoadResponse& load) {
    absl::MutexLock lock(&mu_);
    load_ = load;
  }
  void SetHang(bool hang) {
    absl::MutexLock lock(&mu_);
    hang_ = hang;
  }
  // GetLoad calls held unanswered now.
  int held() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(held_.size());
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    for (grpc::ServerUnaryReactor* r : held_) r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "released"));
    held_.clear();
  }

 private:
  absl::Mutex mu_;
  internal::v1::GetLoadResponse load_;
  bool hang_ = false;
  std::vector<grpc::ServerUnaryReactor*> held_;
};

template <typename Service>
class FakeWorker {
 public:
  FakeWorker() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_GT(port_, 0);
  }
  ~FakeWorker() { Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }
  FakeService<Service>& service() { return service_; }
  void SetServing(bool serving) { server_->GetHealthCheckService()->SetServingStatus(serving); }
  void Shutdown() {
    if (server_ == nullptr) return;
    service_.Release();
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

 private:
  FakeService<Service> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace pdserve::testing
