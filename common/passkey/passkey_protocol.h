// pdserve-passkey's run: the protocols (which lengths, how many trials, where
// each trial's passkey goes), the trials and their outcome, the checks made
// before any Generate, and the statistics per position with the verdict.
// No gRPC: token counting comes in as a function (passkey.h), so all of it is
// tested with fake counters. The trial records (--json-out, --trials-jsonl,
// --resume) are in passkey_trials.h.
//
// The seed protocol (docs/passkey.md, "The seed protocol"): context lengths
// 4096, 8192, 32768, 65536 and 131072; 100 distinct 5-digit passkeys per
// length; one filler per length, so a length's trials differ only in the
// passkey and where it goes; trial i at start, middle or end by i % 3 (100
// trials: 34, 33, 33); greedy; the first \b\d{5}\b of the output is the
// answer; the verdict is the accuracy at 131072 against the target.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/passkey/passkey.h"

namespace pdserve {

enum class PasskeyProtocol {
  kCustom,  // --context-lengths, --n-trials and one --position, as given
  kSeed,    // the seed's reference protocol (above)
};

// "custom" or "seed".
absl::StatusOr<PasskeyProtocol> ParsePasskeyProtocol(absl::string_view text);
const char* PasskeyProtocolName(PasskeyProtocol protocol);

// "1024,2048": positive token counts, duplicates dropped, in order.
// InvalidArgument naming the item that is not one, or for an empty list.
absl::StatusOr<std::vector<int64_t>> ParsePasskeyLengths(absl::string_view text);

// The seed protocol's defaults and the length its verdict is about.
inline constexpr int64_t kSeedContextLengths[] = {4096, 8192, 32768, 65536, 131072};
inline constexpr int64_t kSeedTrialsPerLength = 100;
inline constexpr int64_t kSeedVerdictLength = 131072;

// How the seed protocol spreads a length's trials, for --help and the JSON.
inline constexpr absl::string_view kSeedPositionsName = "start/middle/end by trial % 3";

// What identifies a run's trials: the same spec and trial index give the same
// passkey, position and (with the same tokenizer) prompt. --n-trials is not
// part of it: a run with more trials extends one with fewer.
struct PasskeyRunSpec {
  PasskeyProtocol protocol = PasskeyProtocol::kCustom;
  uint64_t seed = 0;
  std::vector<int64_t> lengths;
  int64_t max_new_tokens = 16;
  PasskeyPosition position;  // every trial's under kCustom; unused under kSeed
};

// "start/middle/end by trial % 3" under kSeed, else the position's name.
std::string PasskeyPositionsName(const PasskeyRunSpec& spec);

// Trial `index`'s position: under kSeed start (i % 3 == 0), middle (1) or
// end (2); under kCustom spec.position.
PasskeyPosition PasskeyTrialPosition(const PasskeyRunSpec& spec, int64_t index);

// The distinct positions a run can use, in order: start, middle, end under
// kSeed (whatever --n-trials), spec.position under kCustom.
std::vector<PasskeyPosition> PasskeyRunPositions(const PasskeyRunSpec& spec);

// InvalidArgument naming the first length L with L + max_new_tokens above
// max_context (the router's Generate would refuse it). OK for max_context 0
// (unknown: a router older than TokenizeResponse.max_context).
absl::Status CheckLengthsFitContext(const std::vector<int64_t>& lengths, int64_t max_new_tokens, int64_t max_context);

// One trial: what is asked, then what came back.
struct PasskeyTrial {
  int64_t context_length = 0;
  int index = 0;
  std::string passkey;
  PasskeyPosition position;
  PasskeyPrompt prompt;
  // The outcome.
  bool done = false;                 // run here, or read back by --resume
  bool resumed = false;              // read back by --resume
  int64_t prompt_tokens = -1;        // Tokenize's count of this trial's prompt
  int64_t usage_prompt_tokens = -1;  // the router's Usage, when the call succeeded
  std::string answer;
  std::vector<uint32_t> answer_ids;  // the generated token ids, in order
  std::optional<std::string> extracted;
  bool correct = false;
  bool failed = false;               // an RPC error; counted as wrong
  std::string error;
  std::optional<double> ttft_ms;
  double latency_ms = 0;
  int64_t tokens = 0;
  std::string finish_reason;
};

// The filler of one length: the prompt with the most filler words that fits
// `context_length` tokens at every position in `positions` (a BPE can count
// the line breaks around the passkey sentence differently per position), so
// all of the length's trials share one filler, word for word. Sized with
// `passkey` (the length's first). `*calls` gets the Tokenize calls made.
// Errors as SizePasskeyPrompt's.
absl::StatusOr<PasskeyPrompt> SizeLengthFiller(int64_t context_length, const std::vector<PasskeyPosition>& positions,
                                               const std::string& passkey, const TokenCounter& count_tokens,
                                               int* calls = nullptr);

// The trials of one length: n_trials passkeys drawn from (spec.seed,
// length), each trial's position from PasskeyTrialPosition, every prompt
// with the same `filler_words` words of the length's filler.
absl::StatusOr<std::vector<PasskeyTrial>> PlanLengthTrials(const PasskeyRunSpec& spec, int64_t context_length,
                                                           int64_t n_trials, int64_t filler_words);

// One length's outcome and latencies over its done trials.
struct PasskeyLengthSummary {
  LengthOutcome outcome;
  double prompt_tokens_median = 0;  // NaN when no trial's prompt was counted
  double p50 = 0, p90 = 0, ttft50 = 0;  // ms over the answered trials; NaN without any
  std::string first_error;
};
PasskeyLengthSummary SummarizePasskeyLength(int64_t context_length, const std::vector<PasskeyTrial>& trials);

// Correct of trials at one position (or all), for one length.
struct PasskeyCell {
  std::string position;  // "start", ..., or "all"
  int64_t trials = 0;
  int64_t correct = 0;
  int64_t failed = 0;
};

// One length's cells: one per position in `positions` order, then all.
struct PasskeyLengthCells {
  int64_t context_length = 0;
  std::vector<PasskeyCell> positions;
  PasskeyCell all;
};

// The done trials counted per length (in `lengths` order) and position.
std::vector<PasskeyLengthCells> CountByPosition(const std::vector<PasskeyTrial>& trials,
                                                const std::vector<int64_t>& lengths,
                                                const std::vector<PasskeyPosition>& positions);

// "34/34 = 100.0% (89.8-100.0%)": correct/trials, accuracy, Wilson 95%;
// "-" with no trials.
std::string FormatPasskeyCell(const PasskeyCell& cell);

// The seed protocol's verdict on kSeedVerdictLength, one line:
//   VERDICT: 131072 tokens: 97/100 = 97.0% (Wilson 91.6-99.0%): >= 85%: PASS
//   VERDICT: 131072 tokens: 80/100 = 80.0% (Wilson 71.1-86.7%): < 85%: FAIL
//   VERDICT: 131072 tokens: NOT RUN (not among the context lengths 512,1024)
enum class SeedVerdictResult { kPass, kFail, kNotRun };
struct SeedVerdict {
  SeedVerdictResult result = SeedVerdictResult::kNotRun;
  std::string line;
};
SeedVerdict JudgeSeedProtocol(const std::vector<PasskeyLengthCells>& cells, double target);
const char* SeedVerdictName(SeedVerdictResult result);  // "PASS", "FAIL", "NOT RUN"

// The progress line: "pdserve-passkey: D/T trials[ (+R resumed)], <rate>,
// elapsed <t>, ETA <t>". The ETA scales the elapsed time by the prompt
// tokens left over those done (`weight_*`: the sum of the trials' context
// lengths), not by trials: a 131072-token trial costs far more than a
// 4096-token one, and the lengths run one after the other.
std::string PasskeyProgressLine(size_t done, size_t total, size_t resumed, double weight_done, double weight_total,
                                double elapsed_s);

}  // namespace pdserve
