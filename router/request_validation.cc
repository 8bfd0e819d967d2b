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
    return FieldError(has_text ? "token_ids" : "text", has_text ? "give the prompt as text or as token_ids, not both"
                                                               : "the prompt is empty: set text or token_ids");
  }
  std::vector<uint32_t> ids;
  if (has_text) {
    absl::StatusOr<std::vector<uint32_t>> enc = tokenizer.Encode(request.text());
    if (!enc.ok()) {
      return WithField(absl::Status(enc.status().code(), absl::StrCat("text: ", enc.status().message())), "text");
    }
    ids = std::move(*enc);
    if (ids.empty()) return FieldError("text", "text tokenizes to no tokens");
  } else {
    ids.assign(request.token_ids().begin(), request.token_ids().end());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= config.vocab_size) {
        return FieldError(absl::StrCat("token_ids[", i, "]"), absl::StrCat("token_ids[", i, "] = ", ids[i],
                                                                           " is not below vocab_size ",
                                                                           config.vocab_size));
      }
    }
  }
  const pdserve::v1::SamplingParams& s = request.sampling();
  if (s.max_new_tokens() < 1) {
    return FieldError("sampling.max_new_tokens", "sampling.max_new_tokens must be at least 1");
  }
  if (s.max_new_tokens() > limits.max_new_tokens_cap) {
    return FieldError("sampling.max_new_tokens", absl::StrCat("sampling.max_new_tokens ", s.max_new_tokens(),
                                                              " is above this router's cap of ",
                                                              limits.max_new_tokens_cap));
  }
  const int64_t total = static_cast<int64_t>(ids.size()) + s.max_new_tokens();
  if (total > config.max_context) {
    // The prompt is at fault when it leaves no room for even one token;
    // otherwise max_new_tokens asks for too many.
    const bool prompt_alone = static_cast<int64_t>(ids.size()) >= config.max_context;
    const char* field = prompt_alone ? (has_text ? "text" : "token_ids") : "sampling.max_new_tokens";
    return FieldError(field, absl::StrCat("the prompt (", ids.size(), " tokens) plus max_new_tokens (",
                                          s.max_new_tokens(), ") is ", total, ", above max_context ",
                                          config.max_context));
  }
  RETURN_IF_ERROR(ValidateSampling(s, "sampling"));
  if (static_cast<uint32_t>(s.stop_size()) > limits.max_stop_sequences) {
    return FieldError("sampling.stop", absl::StrCat("sampling.stop has ", s.stop_size(), " sequences, at most ",
                                                    limits.max_stop_sequences, " are allowed"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    if (s.stop(i).empty()) {
      return FieldError(absl::StrCat("sampling.stop[", i, "]"), absl::StrCat("sampling.stop[", i, "] is empty"));
    }
  }
  return ids;
}

}  // namespace pdserve
