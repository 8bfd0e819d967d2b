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

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/sampling_params.h"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

// A refusal's field, carried as data, not as words of the message: an
// absl::Status payload (kFieldPayloadUrl) holding the request's field path
// in the proto ("sampling.top_p", "token_ids[3]", "text"). The router's
// Generate copies it into the trailing metadata kFieldTrailerKey, where the
// OpenAI HTTP front reads it (router/openai_status.h translates it to the
// OpenAI `param`).
inline constexpr char kFieldPayloadUrl[] = "type.pdserve/field";
inline constexpr char kFieldTrailerKey[] = "pdserve-param";
// `status` with its field set (unchanged when ok).
absl::Status WithField(absl::Status status, absl::string_view field);
// InvalidArgument(message) naming `field`.
absl::Status FieldError(absl::string_view field, absl::string_view message);
// The field a status names, or "".
std::string ErrorField(const absl::Status& status);

// InvalidArgument naming `field` (e.g. "sampling") and the value when
// temperature or top_p is NaN or infinite, or top_p is outside [0, 1]; the
// status's field (ErrorField) is "FIELD.temperature" or "FIELD.top_p".
// temperature <= 0 is greedy (docs/design.md), so negative values are valid.
// top_p 0 is the proto's unset value and means 1 (keep every token).
absl::Status ValidateSampling(const pdserve::v1::SamplingParams& sampling, absl::string_view field);

// The sampling fields the engine uses (max_new_tokens, stop and ignore_eos
// are the caller's).
SamplingParams SamplingFromProto(const pdserve::v1::SamplingParams& p);
// Only those fields: max_new_tokens, stop and ignore_eos stay unset.
pdserve::v1::SamplingParams SamplingToProto(const SamplingParams& s);

}  // namespace pdserve
