#include "train/passkey_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/engine/sampler.h"
#include "common/passkey/passkey.h"

namespace pdserve {
namespace {

// Successive draws from one seed.
class Draws {
 public:
  explicit Draws(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return state_ = SplitMix64(state_); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t Below(uint64_t bound) { return static_cast<uint64_t>(Uniform() * static_cast<double>(bound)); }

 private:
  uint64_t state_;
};

int64_t CountBytes(const std::string& text) { return static_cast<int64_t>(text.size()); }

}  // namespace

uint64_t ExampleSeed(uint64_t seed, DataStream stream, int64_t step, int64_t index) {
  return SplitMix64(SplitMix64(SplitMix64(seed ^ static_cast<uint64_t>(stream)) ^ static_cast<uint64_t>(step)) ^
                  static_cast<uint64_t>(index));
}

int64_t MinPasskeyPromptTokens() { return CountBytes(BuildPasskeyPrompt(0, 0, 0.0, "00000").text); }

absl::StatusOr<PasskeyExample> MakePasskeyExample(uint64_t example_seed, int64_t prompt_tokens) {
  Draws draw(example_seed);
  PasskeyExample ex;
  ex.passkey = FormatPasskey(static_cast<int>(draw.Below(kPasskeySpace)));
  ex.depth = draw.Uniform();  // the builder snaps it to the nearest sentence boundary
  const uint64_t filler_seed = draw.Next();
  absl::StatusOr<PasskeyPrompt> prompt =
      SizePasskeyPrompt(prompt_tokens, ex.depth, ex.passkey,
                        [](const std::string& t) -> absl::StatusOr<int64_t> { return CountBytes(t); },
                        /*calls=*/nullptr, filler_seed);
  if (!prompt.ok()) return prompt.status();
  const std::string text = absl::StrCat(prompt->text, " ", ex.passkey, ".");
  ex.ids.assign(text.begin(), text.end());
  for (int64_t& id : ex.ids) id &= 0xff;  // bytes, whatever the char signedness
  ex.prompt_tokens = CountBytes(prompt->text);
  return ex;
}

int64_t CurriculumLength(uint64_t seed, int64_t step, int64_t min_tokens, int64_t max_tokens,
                         int64_t curriculum_steps) {
  int64_t cap = max_tokens;
  if (curriculum_steps > 0 && step < curriculum_steps) {
    cap = min_tokens + (max_tokens - min_tokens) * step / curriculum_steps;
  }
  Draws draw(SplitMix64(seed ^ 0x6c656e677468ull) ^ static_cast<uint64_t>(step));
  return min_tokens + static_cast<int64_t>(draw.Below(static_cast<uint64_t>(cap - min_tokens + 1)));
}

}  // namespace pdserve
