#include "prefill_service/prefill_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int, handoff_heartbeat_ms, 5000,
          "While a prompt is prefilled, milliseconds between the heartbeats that keep its decode worker's hand-off "
          "timeout from expiring.");
ABSL_FLAG(int, max_queue, 16, "Prompts that may wait for an executor; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, executors, 1, "Prefill forwards run at once.");
ABSL_FLAG(int, prefill_batch_tokens, -1,
          "Queued prompts are prefilled together, as segments of one forward, while their tokens total at most "
          "this (a longer prompt runs alone). -1 = the most that keeps each prompt's K/V and first token bit for "
          "bit those of its prefill alone: 32, or --prefill-chunk with bf16 weights under --bf16-matmul dot. "
          "0 = one prompt per forward. Larger values read the weights once for more prompts but the bits then "
          "depend on the batch.");

namespace pdserve {

absl::StatusOr<PrefillServiceOptions> PrefillOptionsFromFlags() {
  PrefillServiceOptions po;
  po.max_queue = absl::GetFlag(FLAGS_max_queue);
  po.executors = absl::GetFlag(FLAGS_executors);
  po.batch_tokens = absl::GetFlag(FLAGS_prefill_batch_tokens);
  const int heartbeat_ms = absl::GetFlag(FLAGS_handoff_heartbeat_ms);
  po.progress_interval = absl::Milliseconds(heartbeat_ms);
  if (po.max_queue < 0) return absl::InvalidArgumentError(absl::StrCat("--max-queue=", po.max_queue, ": must be >= 0"));
  if (po.executors < 1) return absl::InvalidArgumentError(absl::StrCat("--executors=", po.executors, ": must be >= 1"));
  if (po.batch_tokens < -1) {
    return absl::InvalidArgumentError(absl::StrCat("--prefill-batch-tokens=", po.batch_tokens, ": must be >= -1"));
  }
  if (heartbeat_ms < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--handoff-heartbeat-ms=", heartbeat_ms, ": must be >= 1"));
  }
  return po;
}

}  // namespace pdserve
