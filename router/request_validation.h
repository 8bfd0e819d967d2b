// What the router checks before it spends a worker on a request. Every
// failure is InvalidArgument (or the tokenizer's code for a text prompt) with
// a sentence that names the field, and the field as data: ErrorField(status)
// (common/net/sampling_validation.h) is its proto path, e.g. "text",
// "token_ids[2]", "sampling.max_new_tokens", "sampling.top_p",
// "sampling.stop[1]". A prompt plus max_new_tokens above max_context names
// sampling.max_new_tokens, or the prompt when it alone fills the context.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/tokenizer/tokenizer.h"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

struct RequestLimits {
  uint32_t max_new_tokens_cap = 4096;
  uint32_t max_stop_sequences = 8;
};

// Validates `request` and returns its prompt ids (tokenized when it came
// as text):
//   exactly one of text and token_ids; every id < vocab_size;
//   1 <= max_new_tokens <= the cap; prompt + max_new_tokens <= max_context;
//   temperature >= 0 (and finite); top_p in [0, 1]; few, non-empty stops.
absl::StatusOr<std::vector<uint32_t>> ValidateGenerateRequest(const pdserve::v1::GenerateRequest& request,
                                                              const ModelConfig& config,
                                                              const Tokenizer& tokenizer,
                                                              const RequestLimits& limits);

}  // namespace pdserve
