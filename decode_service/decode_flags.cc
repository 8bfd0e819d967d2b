#include "decode_service/decode_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int64_t, kv_budget_mb, 4096, "KV bytes (MiB) all live sequences may reserve together.");
ABSL_FLAG(int, max_batch, 64, "Sequences per decode step.");
ABSL_FLAG(int, handoff_timeout_s, 60,
          "Seconds an admitted request may wait for its KV hand-off to start, and a started hand-off may go without "
          "progress (the prefill worker sends a heartbeat every 5 s).");
ABSL_FLAG(int64_t, local_prefill_limit, 2048,
          "Longest prompt a Decode call may ask this worker to prefill itself (it stalls running streams meanwhile); "
          "longer ones get INVALID_ARGUMENT. Keep it >= the router's --local-prefill-max-tokens.");

namespace pdserve {

absl::StatusOr<BatchSchedulerOptions> DecodeOptionsFromFlags() {
  const int64_t budget_mb = absl::GetFlag(FLAGS_kv_budget_mb);
  // 2^43 MiB = 8 EiB: beyond it the byte count overflows.
  if (budget_mb < 1 || budget_mb >= (int64_t{1} << 43)) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-budget-mb=", budget_mb, ": must be in [1, 2^43)"));
  }
  BatchSchedulerOptions so;
  so.kv_budget_bytes = budget_mb << 20;
  so.max_batch = absl::GetFlag(FLAGS_max_batch);
  if (so.max_batch < 1) return absl::InvalidArgumentError(absl::StrCat("--max-batch=", so.max_batch, ": must be >= 1"));
  const int timeout_s = absl::GetFlag(FLAGS_handoff_timeout_s);
  if (timeout_s < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--handoff-timeout-s=", timeout_s, ": must be >= 1"));
  }
  so.handoff_timeout = absl::Seconds(timeout_s);
  so.local_prefill_max_tokens = absl::GetFlag(FLAGS_local_prefill_limit);
  if (so.local_prefill_max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-prefill-limit=", so.local_prefill_max_tokens, ": must be >= 0"));
  }
  return so;
}

}  // namespace pdserve
