#include "common/net/sampling_validation.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

absl::Status WithField(absl::Status status, absl::string_view field) {
  if (!status.ok()) status.SetPayload(kFieldPayloadUrl, absl::Cord(field));
  return status;
}

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(message), field);
}

std::string ErrorField(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayloadUrl);
  return field.has_value() ? std::string(*field) : std::string();
}

absl::Status ValidateSampling(const pdserve::v1::SamplingParams& s, absl::string_view field) {
  if (!std::isfinite(s.temperature())) {
    return FieldError(absl::StrCat(field, ".temperature"), absl::StrCat(field, ".temperature must be a finite number ",
                                                                        "(<= 0 is greedy), got ", s.temperature()));
  }
  if (!(s.top_p() >= 0 && s.top_p() <= 1)) {
    return FieldError(absl::StrCat(field, ".top_p"), absl::StrCat(field, ".top_p must be in [0, 1], got ", s.top_p()));
  }
  return absl::OkStatus();
}

SamplingParams SamplingFromProto(const pdserve::v1::SamplingParams& p) {
  return SamplingParams{p.temperature(), p.top_p(), static_cast<int64_t>(p.top_k()), p.seed()};
}

pdserve::v1::SamplingParams SamplingToProto(const SamplingParams& s) {
  pdserve::v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_p(s.top_p);
  p.set_top_k(static_cast<decltype(p.top_k())>(s.top_k));
  p.set_seed(s.seed);
  return p;
}

}  // namespace pdserve
