#include "router/router_flags.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/net/log_flags.h"
#include "common/util/log.h"

ABSL_FLAG(uint32_t, max_new_tokens_cap, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int, max_attempts, 3, "Placement attempts per request before UNAVAILABLE.");
ABSL_FLAG(int64_t, local_prefill_max_tokens, 0,
          "Prompts of at most this many tokens are prefilled on the decode worker itself (no prefill "
          "worker, no KV hand-off); 0 turns it off. Keep it <= the decode workers' --local-prefill-limit.");
ABSL_FLAG(int, max_inflight, 512, "Requests placed or streaming at once; more wait in the queue.");
ABSL_FLAG(int, max_queued_requests, 4096,
          "Requests that may wait, in arrival order, for a worker with room (deadlines honoured); more get "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_inflight_per_client, 0,
          "Requests one client may have queued or in flight; more get RESOURCE_EXHAUSTED (0 = no limit). A gRPC "
          "client is its peer address; an HTTP caller its API key when --api-key is set, else its peer address.");
ABSL_FLAG(double, http_request_timeout_s, 600,
          "Deadline of each HTTP API request, from its arrival to its last byte; a client may ask for less with "
          "an 'X-Request-Timeout: SECONDS' header. Past it: 504 (mid-stream: an SSE error event).");

namespace pdserve {
namespace {

// InvalidArgument "--NAME=VALUE: must be >= MIN" unless value >= min.
absl::Status AtLeast(const char* name, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= ", min));
}

}  // namespace

absl::StatusOr<RouterOptions> RouterOptionsFromFlags() {
  RouterOptions ro;
  ro.limits.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  ro.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  ro.log_requests = absl::GetFlag(FLAGS_log_requests);
  ro.local_prefill_max_tokens = absl::GetFlag(FLAGS_local_prefill_max_tokens);
  ro.queue.max_active = absl::GetFlag(FLAGS_max_inflight);
  ro.queue.max_waiting = absl::GetFlag(FLAGS_max_queued_requests);
  ro.queue.max_per_client = absl::GetFlag(FLAGS_max_inflight_per_client);
  for (const absl::Status& st : {AtLeast("max-new-tokens-cap", ro.limits.max_new_tokens_cap, 1),
                                 AtLeast("max-attempts", ro.max_attempts, 1),
                                 AtLeast("local-prefill-max-tokens", ro.local_prefill_max_tokens, 0),
                                 AtLeast("max-inflight", ro.queue.max_active, 1),
                                 AtLeast("max-queued-requests", ro.queue.max_waiting, 0),
                                 AtLeast("max-inflight-per-client", ro.queue.max_per_client, 0)}) {
    if (!st.ok()) return st;
  }
  const double timeout_s = absl::GetFlag(FLAGS_http_request_timeout_s);
  if (!(timeout_s > 0) || timeout_s > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-request-timeout-s=", timeout_s, ": must be > 0 and at most 1e7"));
  }
  return ro;
}

absl::Duration HttpRequestTimeoutFromFlags() { return absl::Seconds(absl::GetFlag(FLAGS_http_request_timeout_s)); }

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeServingTokenizer(const ModelConfig& config, const std::string& model_dir,
                                                                 const std::string& program) {
  auto tokenizer = MakeTokenizer(config, model_dir);
  if (absl::IsUnimplemented(tokenizer.status()) || absl::IsNotFound(tokenizer.status())) {
    const std::string reason(tokenizer.status().message());
    log::Warn(absl::StrCat(reason, "; serving token_ids prompts only"), {}, log::TextPrefix::Named(program));
    return MakeIdsOnlyTokenizer(config.vocab_size, reason);
  }
  return tokenizer;
}

}  // namespace pdserve
