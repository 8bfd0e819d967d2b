// The prefill worker's component flags, defined once and linked into
// pdserve-prefill and pdserve-local (one default each):
//   --max-queue, --executors, --prefill-batch-tokens, --handoff-heartbeat-ms
// Per-process flags (--listen, --decode-allowlist, --metrics-*,
// --drain-timeout-s, --kv-transport) stay in each binary's main.cc; the
// engine's are common/engine/engine_flags.
#pragma once

#include "absl/status/statusor.h"
#include "prefill_service/prefill_service.h"

namespace pdserve {

// The flags, validated, as PrefillServiceOptions. InvalidArgument naming the
// flag and its value when one is out of range. `model_fingerprint`,
// `allowed_decode_addresses` and `metrics` are left for the caller to set.
absl::StatusOr<PrefillServiceOptions> PrefillOptionsFromFlags();

}  // namespace pdserve
