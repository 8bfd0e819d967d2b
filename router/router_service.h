// RouterService: the public pdserve.v1.Generator.
//
// Generate validates and tokenizes on the gRPC thread, takes a place in
// the admission queue (full: RESOURCE_EXHAUSTED) and returns its reactor.
// From there the request is a chain of callbacks, with no thread of its own
// (GenerateCall, generate_call.h):
//   1. its turn comes in the admission queue (AdmissionQueue::Wait);
//   2. a placement attempt (PlacementAttempt, placement_attempt.h) picks a
//      decode worker by load; its Decode stream reserves the KV and answers
//      `admitted` (RESOURCE_EXHAUSTED / UNAVAILABLE: next worker);
//   3. it picks a prefill worker; Prefill runs the prompt and pushes the K/V
//      to the chosen decode worker (UNAVAILABLE / RESOURCE_EXHAUSTED before
//      any token: retry elsewhere). Prompts up to local_prefill_max_tokens
//      skip this: the Decode call carries them and the decode worker
//      prefills them itself;
//   4. the decode stream is relayed: incremental detokenization (whole
//      UTF-8 characters only), stop sequences, usage on the last message.
// Both worker calls use gRPC's callback client API. Client cancellation and
// deadlines reach both workers through the outgoing calls' contexts. When
// every attempt failed, the answer is the most informative attempt's
// status; when that was "full", the request waits in the queue again
// instead. Which side of a failed hand-off to avoid is data, not text: the
// trailing metadata pdserve-failed-side, or which of the two streams broke
// first (retry_policy.h). Internal request ids are random (unguessable);
// the access log escapes client text.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/model/config.h"
#include "common/net/metrics.h"
#include "common/tokenizer/tokenizer.h"
#include "pdserve/v1/generate.grpc.pb.h"
#include "router/admission_queue.h"
#include "router/request_validation.h"
#include "router/worker_pool.h"

namespace pdserve {

struct RouterOptions {
  RequestLimits limits;
  // Placement attempts per request (each may use another worker pair).
  int max_attempts = 3;
  // Requests placed at once, requests waiting, and a client's share: a
  // burst waits in arrival order (deadlines honoured); only past
  // queue.max_waiting is it refused (RESOURCE_EXHAUSTED naming the bound).
  AdmissionQueueOptions queue;
  // Conditional local prefill: prompts of at most this many tokens are
  // prefilled on the decode worker itself, skipping the prefill worker and
  // the hand-off (0 = never).
  int64_t local_prefill_max_tokens = 0;
  // One line per finished request on stderr.
  bool log_requests = true;
  // Where to report metrics; nullptr = nowhere. Must outlive the service.
  MetricsRegistry* metrics = nullptr;
  // Non-empty: Generate and Tokenize require `authorization: Bearer
  // <api_key>` metadata (UNAUTHENTICATED otherwise; grpc_security.h).
  std::string api_key;
};

class RouterService final : public pdserve::v1::Generator::CallbackService {
 public:
  RouterService(const ModelConfig& config, std::unique_ptr<Tokenizer> tokenizer, WorkerPool* prefill,
                WorkerPool* decode, RouterOptions options);
  // Waits for in-flight requests to end (call after the server's Shutdown,
  // which cancels them).
  ~RouterService() override;

  grpc::ServerWriteReactor<pdserve::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const pdserve::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const pdserve::v1::TokenizeRequest* request,
                                     pdserve::v1::TokenizeResponse* response) override;

  // The model's tokenizer (the HTTP front renders harmony chat with it).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  class GenerateCall;      // generate_call.h
  class PlacementAttempt;  // placement_attempt.h

  // A Generate or Tokenize call is done with the service (its last use).
  void EndInflight();
  // Counts requests by final status code (created on first use).
  Counter* RequestsCounter(grpc::StatusCode code);
  // Counts ended requests by finish reason: one of kCompletionReasons.
  static constexpr const char* kCompletionReasons[] = {"length", "eos", "stop", "abort"};
  Counter* CompletionsCounter(const char* finish_reason);

  const ModelConfig config_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  // Tokens that end a generation besides the workers' eos_token_id: a
  // harmony model's <|return|> and <|call|> (harmony_chat.h). The workers
  // stop at one id only, so the relay ends the stream at these and cancels
  // the decode call, as a stop string does; ignore_eos goes past them.
  const std::vector<uint32_t> stop_ids_;
  MetricsRegistry own_metrics_;
  MetricsRegistry* metrics_;
  Histogram* ttft_seconds_;
  Histogram* tpot_seconds_;
  Histogram* e2e_seconds_;
  Histogram* itl_seconds_;
  Counter* prompt_tokens_;
  Counter* generated_tokens_;
  Counter* retries_;
  Counter* requeued_;
  Counter* local_prefills_;
  WorkerPool* prefill_;
  WorkerPool* decode_;
  const RouterOptions options_;
  AdmissionQueue queue_;

  absl::Mutex mu_;
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve
