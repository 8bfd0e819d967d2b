// The decode worker's component flags, defined once and linked into
// pdserve-decode and pdserve-local (one default each):
//   --kv-budget-mb, --max-batch, --handoff-timeout-s, --local-prefill-limit
// Per-process flags (--listen, --metrics-*, --drain-timeout-s,
// --kv-transport) stay in each binary's main.cc; the engine's are
// common/engine/engine_flags.
#pragma once

#include "absl/status/statusor.h"
#include "decode_service/batch_scheduler.h"

namespace pdserve {

// The flags, validated, as BatchSchedulerOptions. InvalidArgument naming the
// flag and its value when one is out of range. `model_fingerprint` and
// `metrics` are left for the caller to set.
absl::StatusOr<BatchSchedulerOptions> DecodeOptionsFromFlags();

}  // namespace pdserve
