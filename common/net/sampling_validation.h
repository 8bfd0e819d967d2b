// pdserve.v1.SamplingParams at the services' edge:
//   ValidateSampling    the one check, applied at every boundary that takes
//                       them: the router's Generate, a direct Decode with a
//                       local prefill, and the prefill worker's Prefill.
//                       Internal callers are not trusted more than public
//                       ones;
//   SamplingFromProto   the domain SamplingParams of the wire's (the decode
//   SamplingToProto     and prefill services, and the hand-off header), and
//                       back.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "common/model/sampling_params.h"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

// InvalidArgument naming `field` (e.g. "sampling") and the value when
// temperature or top_p is NaN or infinite, or top_p is outside [0, 1].
// temperature <= 0 is greedy (docs/design.md), so negative values are valid.
absl::Status ValidateSampling(const pdserve::v1::SamplingParams& sampling, absl::string_view field);

// The sampling fields the engine uses (max_new_tokens, stop and ignore_eos
// are the caller's).
SamplingParams SamplingFromProto(const pdserve::v1::SamplingParams& p);
// Only those fields: max_new_tokens, stop and ignore_eos stay unset.
pdserve::v1::SamplingParams SamplingToProto(const SamplingParams& s);

}  // namespace pdserve
