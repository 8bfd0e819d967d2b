// Hugging Face gpt-oss configs (openai/gpt-oss-20b, gpt-oss-120b): their
// config.json, read with transformers' GptOssConfig keys, and the stop ids of
// generation_config.json, into a ModelConfig with family kGptOss
// (docs/model.md, "gpt-oss checkpoints"). No LibTorch here.
//
// Every key of config.json is one of:
//   - mapped to a ModelConfig field (sizes, RoPE, window, norm, stops);
//   - checked against the one value pdserve implements (hidden_act "silu",
//     attention_bias true, rope_type "yarn", layer_types alternating from a
//     sliding layer, quant_method "mxfp4" with the published
//     modules_to_not_convert);
//   - known not to change the math (dropout, initializer, aux loss, cache
//     and output flags, dtype, version, pad/bos ids);
// any other key is refused by name: a checkpoint whose math pdserve does not
// implement is never served with a silent default. The aliases are taken as
// published: num_experts_per_tok and experts_per_token (equal when both are
// given), rope_scaling and the newer rope_parameters (which may carry
// rope_theta). Keys absent from the file take GptOssConfig's defaults,
// except the sizes, which must be present.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/config.h"

namespace pdserve {

// True when `json_text` is a JSON object with "model_type": a Hugging Face
// config.json rather than a pdserve one.
bool IsHfConfig(absl::string_view json_text);

// Parses a gpt-oss config.json and, when not empty, its
// generation_config.json (whose eos_token_id, an id or a list, adds stop
// ids). InvalidArgument naming the key and the value found otherwise:
// another model_type, an unknown key, a value pdserve does not implement,
// a missing size, or sizes ValidateModelConfig refuses.
absl::StatusOr<ModelConfig> ParseHfGptOssConfig(absl::string_view config_json,
                                                absl::string_view generation_config_json = "");

// ParseHfGptOssConfig with `dir`/generation_config.json when that file
// exists. The tokenizer is `dir`/tokenizer.json and chat is harmony.
absl::StatusOr<ModelConfig> LoadHfGptOssConfig(absl::string_view config_json, const std::string& dir);

}  // namespace pdserve
