// Passkey retrieval (Mohtashami & Jaggi, 2023, "Landmark Attention"): the
// prompts, the passkeys, answer extraction and the statistics of
// pdserve-passkey. No gRPC here: token counting comes in as a function, so
// the prompt sizing is tested with fake counters and run against the
// router's Tokenize RPC in production.
//
// The prompt follows the paper's layout exactly, one part per line:
//
//   There is an important info hidden inside a lot of irrelevant text. Find
//   it and memorize them. I will quiz you about the important information
//   there.
//   <filler before>
//   The passkey is 01234. Remember it. 01234 is the passkey.
//   <filler after>
//   What is the passkey? The passkey is
//
// Two departures from the paper's script, both deliberate: "passkey" is one
// word everywhere (the paper writes "pass key"), and the filler is not one
// fixed block repeated but the paper's five sentences in a per-block order
// drawn from a generator seeded by the context length, so lengths do not
// all share one periodic text. The filler has no digits, so the only 5-digit
// numbers in a prompt are the passkey's.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

// Passkeys are drawn from [0, kPasskeySpace) and printed with 5 digits.
inline constexpr int kPasskeySpace = 100000;

// Where the passkey sentence goes: a depth fraction of the filler, 0 = before
// all of it, 1 = after all of it (right before the question).
struct PasskeyPosition {
  std::string name;  // "start", "middle", "end" or the fraction as given
  double depth = 0.5;
};

// Parses "start" (0), "middle" (0.5), "end" (1) or a number in [0, 1].
absl::StatusOr<PasskeyPosition> ParsePasskeyPosition(absl::string_view text);

// "00042": five digits, leading zeros kept. `passkey` must be in [0, 99999].
std::string FormatPasskey(int passkey);

// `n_trials` distinct passkeys drawn without replacement from 0..99999 by a
// generator seeded with `base_seed + context_length`, in draw order.
// InvalidArgument when n_trials is not in [0, 100000].
absl::StatusOr<std::vector<int>> DrawPasskeys(int64_t n_trials, uint64_t base_seed, int64_t context_length);

// The first `n_words` words of the filler drawn from `filler_seed`: the
// paper's five sentences, each block of five in a seeded order. A longer
// stream starts with the shorter one, so prompts grow monotonically with
// n_words. pdserve-passkey seeds with the context length (one filler per
// length); pdserve-train seeds per example.
std::vector<std::string> FillerWords(uint64_t filler_seed, int64_t n_words);

// One prompt and where its passkey sits.
struct PasskeyPrompt {
  std::string text;
  int64_t filler_words = 0;        // filler words in the whole prompt
  int64_t filler_words_before = 0; // filler words before the passkey sentence
  size_t passkey_offset = 0;       // byte offset of the passkey sentence in text
  int64_t tokens = -1;             // the counter's count, when sized; -1 otherwise
};

// Builds the prompt with exactly `filler_words` words of filler. The passkey
// sentence goes at the sentence boundary nearest to depth * filler_words
// (ties go to the earlier one); depth 0 and 1 are exactly the start and the
// end even when the filler ends in part of a sentence.
// `filler_seed` as in FillerWords.
PasskeyPrompt BuildPasskeyPrompt(uint64_t filler_seed, int64_t filler_words, double depth,
                                 const std::string& passkey);

// Counts the tokens of a text under the model's tokenizer.
using TokenCounter = std::function<absl::StatusOr<int64_t>(const std::string&)>;

// The prompt with the most filler words whose token count is at most
// `context_length`: never over, and under by less than one filler word's
// tokens (a word and its space: at most 8 bytes, so <= 8 tokens for byte- or
// char-level tokenizers, typically 1-2 for BPE). Interpolation search on the
// word count, which the near-linear count makes converge in a handful of
// calls (`*calls` gets how many). The filler is seeded by `filler_seed`,
// or by context_length when it is unset. InvalidArgument when even the
// prompt without filler is longer than context_length; a counter error is
// returned as is.
absl::StatusOr<PasskeyPrompt> SizePasskeyPrompt(int64_t context_length, double depth, const std::string& passkey,
                                                const TokenCounter& count_tokens, int* calls = nullptr,
                                                std::optional<uint64_t> filler_seed = std::nullopt);

// The answer: the first `\b(\d{5})\b` of `generated` (only the new text,
// never the prompt). \b as in ECMAScript/PCRE: [A-Za-z0-9_] are word
// characters, everything else (non-ASCII bytes included) is not. So
// "123456" and "x12345y" give nothing, "(12345)" and "12345." give 12345.
std::optional<std::string> ExtractPasskeyAnswer(absl::string_view generated);

// The Wilson score interval for `successes` of `trials` at 95% (z = 1.96).
// {0, 1} when trials is 0.
struct Interval {
  double low = 0;
  double high = 1;
};
Interval WilsonInterval(int64_t successes, int64_t trials);

// The q-th quantile (q in [0, 1]) with linear interpolation between order
// statistics (numpy's default). NaN when `values` is empty.
double Quantile(std::vector<double> values, double q);

// The outcome of one context length, for the headline.
struct LengthOutcome {
  int64_t context_length = 0;
  int64_t trials = 0;
  int64_t correct = 0;
  int64_t failed = 0;              // RPC errors; counted as wrong
  int64_t answers_with_number = 0; // answered trials whose text held a 5-digit number
};

// The headline for one length: "PASS: ..." when correct / trials >= target,
// else "WARNING: ..." that names the likely cause: an untrained model when
// the answers hold no 5-digit number or accuracy is near 0, the RPC errors
// when every trial failed.
struct Verdict {
  bool pass = false;
  std::string line;
};
Verdict JudgePasskey(const LengthOutcome& outcome, double target, absl::string_view position_name);

}  // namespace pdserve
