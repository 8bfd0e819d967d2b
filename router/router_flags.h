// The router's component flags, defined once and linked into pdserve-router
// and pdserve-local (one default each):
//   --max-new-tokens-cap, --max-attempts, --local-prefill-max-tokens,
//   --max-inflight, --max-queued-requests, --max-inflight-per-client,
//   --http-request-timeout-s
// (and reads --log-requests, common/net/log_flags.h)
// Per-process flags (--listen, the worker addresses, --metrics-*,
// --drain-timeout-s) stay in each binary's main.cc.
//
//   RouterOptionsFromFlags  the flags, validated, as RouterOptions
//   MakeServingTokenizer    the model's tokenizer, or ids only when the
//                           model has none (with one warning line)
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/config.h"
#include "common/tokenizer/tokenizer.h"
#include "router/router_service.h"

namespace pdserve {

// InvalidArgument naming the flag and its value when one is out of range.
// `metrics` is left for the caller to set.
absl::StatusOr<RouterOptions> RouterOptionsFromFlags();

// --http-request-timeout-s (RouterOptionsFromFlags checked its range).
absl::Duration HttpRequestTimeoutFromFlags();

// MakeTokenizer(config, model_dir); a model without its tokenizer file
// (random weights for benchmarks) is still served, as token ids, after one
// warning line on stderr prefixed by `program`. Other errors are returned.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeServingTokenizer(const ModelConfig& config, const std::string& model_dir,
                                                                 const std::string& program);

}  // namespace pdserve
