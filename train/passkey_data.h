// Synthetic training data on the passkey protocol: the prompts of
// pdserve-passkey itself (common/passkey/passkey.h), with the filler order, the
// depth, the length and the passkey drawn per example, followed by the answer
// the served model should give (" NNNNN."). Byte tokens (ids 0-255). No
// LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

// The answer a prompt asks for: a space, the five digits and a period.
inline constexpr int64_t kPasskeyAnswerTokens = 7;

struct PasskeyExample {
  std::vector<int64_t> ids;  // prompt bytes, then the kPasskeyAnswerTokens answer bytes
  int64_t prompt_tokens = 0; // the answer starts at this index
  std::string passkey;       // five digits
  double depth = 0;          // where the passkey sentence was asked to go
};

// Which stream an example seed comes from: training and evaluation never share one.
enum class DataStream : uint64_t { kTrain = 1, kEval = 2 };

// The seed of example `index` of `step` in `stream` for a run seeded with `seed`.
uint64_t ExampleSeed(uint64_t seed, DataStream stream, int64_t step, int64_t index);

// The byte length of a passkey prompt without any filler: the shortest
// prompt there is.
int64_t MinPasskeyPromptTokens();

// One example whose prompt has at most `prompt_tokens` byte tokens (and
// fewer by less than one filler word), everything drawn from `example_seed`:
// the passkey uniformly from 00000-99999, the depth uniformly in [0, 1], the
// filler order. InvalidArgument when prompt_tokens < MinPasskeyPromptTokens().
absl::StatusOr<PasskeyExample> MakePasskeyExample(uint64_t example_seed, int64_t prompt_tokens);

// The prompt length of `step` under a curriculum from short to long: drawn
// uniformly from [min_tokens, cap], cap growing linearly from min_tokens at
// step 0 to max_tokens at `curriculum_steps` (0: no curriculum).
int64_t CurriculumLength(uint64_t seed, int64_t step, int64_t min_tokens, int64_t max_tokens,
                         int64_t curriculum_steps);

}  // namespace pdserve
