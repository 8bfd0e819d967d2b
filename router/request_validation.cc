#include "router/request_validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/net/sampling_validation.h"
#include "common/util/status_macros.h"

namespace pdserve {

absl::StatusOr<std::vector<uint32_t>> ValidateGenerateRequest(const pdserve::v1::GenerateRequest& request,
                                                              const ModelConfig& config,
                                                              const Tokenizer& tokenizer,
                                                              const RequestLimits& limits) {
  const bool has_text = !request.text().empty();
  const bool has_ids = request.token_ids_size() > 0;
  if (has_text == has_ids) {
    return absl::InvalidArgumentError(has_text ? "give the prompt as text or as token_ids, not both"
                                               : "the prompt is empty: set text or token_ids");
  }
  std::vector<uint32_t> ids;
  if (has_text) {
    absl::StatusOr<std::vector<uint32_t>> enc = tokenizer.Encode(request.text());
    if (!enc.ok()) return absl::Status(enc.status().code(), absl::StrCat("text: ", enc.status().message()));
    ids = std::move(*enc);
    if (ids.empty()) return absl::InvalidArgumentError("text tokenizes to no tokens");
  } else {
    ids.assign(request.token_ids().begin(), request.token_ids().end());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= config.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token_ids[", i, "] = ", ids[i], " is not below vocab_size ", config.vocab_size));
      }
    }
  }
  const pdserve::v1::SamplingParams& s = request.sampling();
  if (s.max_new_tokens() < 1) {
    return absl::InvalidArgumentError("sampling.max_new_tokens must be at least 1");
  }
  if (s.max_new_tokens() > limits.max_new_tokens_cap) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.max_new_tokens ", s.max_new_tokens(),
                                                   " is above this router's cap of ", limits.max_new_tokens_cap));
  }
  const int64_t total = static_cast<int64_t>(ids.size()) + s.max_new_tokens();
  if (total > config.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", ids.size(), " tokens) plus max_new_tokens (",
                                                   s.max_new_tokens(), ") is ", total, ", above max_context ",
                                                   config.max_context));
  }
  RETURN_IF_ERROR(ValidateSampling(s, "sampling"));
  if (static_cast<uint32_t>(s.stop_size()) > limits.max_stop_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop has ", s.stop_size(), " sequences, at most ",
                                                   limits.max_stop_sequences, " are allowed"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    if (s.stop(i).empty()) return absl::InvalidArgumentError(absl::StrCat("sampling.stop[", i, "] is empty"));
  }
  return ids;
}

}  // namespace pdserve
