#include "common/passkey/passkey_protocol.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/progress.h"

namespace pdserve {

absl::StatusOr<PasskeyProtocol> ParsePasskeyProtocol(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "custom") return PasskeyProtocol::kCustom;
  if (t == "seed") return PasskeyProtocol::kSeed;
  return absl::InvalidArgumentError(absl::StrCat("protocol '", text, "' is not custom or seed"));
}

absl::StatusOr<std::vector<int64_t>> ParsePasskeyLengths(absl::string_view text) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a positive token count"));
    }
    if (seen.insert(v).second) out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("no context length given");
  return out;
}

const char* PasskeyProtocolName(PasskeyProtocol protocol) {
  return protocol == PasskeyProtocol::kSeed ? "seed" : "custom";
}

std::string PasskeyPositionsName(const PasskeyRunSpec& spec) {
  return spec.protocol == PasskeyProtocol::kSeed ? std::string(kSeedPositionsName) : spec.position.name;
}

PasskeyPosition PasskeyTrialPosition(const PasskeyRunSpec& spec, int64_t index) {
  if (spec.protocol != PasskeyProtocol::kSeed) return spec.position;
  switch (index % 3) {
    case 0: return PasskeyPosition{"start", 0.0};
    case 1: return PasskeyPosition{"middle", 0.5};
    default: return PasskeyPosition{"end", 1.0};
  }
}

std::vector<PasskeyPosition> PasskeyRunPositions(const PasskeyRunSpec& spec) {
  if (spec.protocol != PasskeyProtocol::kSeed) return {spec.position};
  return {PasskeyTrialPosition(spec, 0), PasskeyTrialPosition(spec, 1), PasskeyTrialPosition(spec, 2)};
}

absl::Status CheckLengthsFitContext(const std::vector<int64_t>& lengths, int64_t max_new_tokens,
                                    int64_t max_context) {
  if (max_context <= 0) return absl::OkStatus();  // unknown
  for (int64_t length : lengths) {
    if (length + max_new_tokens > max_context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "context length ", length, " plus --max-new-tokens ", max_new_tokens, " is ", length + max_new_tokens,
          ", above the model's max_context ", max_context, " (the router would refuse every Generate at ",
          length, " tokens; the longest length this model serves with --max-new-tokens ", max_new_tokens, " is ",
          max_context - max_new_tokens, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PasskeyPrompt> SizeLengthFiller(int64_t context_length, const std::vector<PasskeyPosition>& positions,
                                               const std::string& passkey, const TokenCounter& count_tokens,
                                               int* calls) {
  std::optional<PasskeyPrompt> best;
  int total_calls = 0;
  for (const PasskeyPosition& position : positions) {
    int n = 0;
    absl::StatusOr<PasskeyPrompt> p = SizePasskeyPrompt(context_length, position.depth, passkey, count_tokens, &n);
    total_calls += n;
    if (calls != nullptr) *calls = total_calls;
    if (!p.ok()) return p.status();
    if (!best || p->filler_words < best->filler_words) best = *std::move(p);
  }
  if (!best) return absl::InvalidArgumentError("no position to size the prompt for");
  return *std::move(best);
}

absl::StatusOr<std::vector<PasskeyTrial>> PlanLengthTrials(const PasskeyRunSpec& spec, int64_t context_length,
                                                           int64_t n_trials, int64_t filler_words) {
  absl::StatusOr<std::vector<int>> keys = DrawPasskeys(n_trials, spec.seed, context_length);
  if (!keys.ok()) return keys.status();
  std::vector<PasskeyTrial> trials;
  trials.reserve(keys->size());
  for (int i = 0; i < static_cast<int>(keys->size()); ++i) {
    PasskeyTrial t;
    t.context_length = context_length;
    t.index = i;
    t.passkey = FormatPasskey((*keys)[i]);
    t.position = PasskeyTrialPosition(spec, i);
    // Seeded by the length: one filler per length, whatever the passkey.
    t.prompt = BuildPasskeyPrompt(static_cast<uint64_t>(context_length), filler_words, t.position.depth, t.passkey);
    trials.push_back(std::move(t));
  }
  return trials;
}

PasskeyLengthSummary SummarizePasskeyLength(int64_t context_length, const std::vector<PasskeyTrial>& trials) {
  PasskeyLengthSummary r;
  r.outcome.context_length = context_length;
  std::vector<double> latency, ttft, prompt_tokens;
  for (const PasskeyTrial& t : trials) {
    if (t.context_length != context_length || !t.done) continue;
    ++r.outcome.trials;
    if (t.prompt_tokens >= 0) prompt_tokens.push_back(static_cast<double>(t.prompt_tokens));
    if (t.failed) {
      ++r.outcome.failed;
      if (r.first_error.empty()) r.first_error = t.error;
      continue;
    }
    if (t.correct) ++r.outcome.correct;
    if (t.extracted) ++r.outcome.answers_with_number;
    latency.push_back(t.latency_ms);
    if (t.ttft_ms) ttft.push_back(*t.ttft_ms);
  }
  r.prompt_tokens_median = Quantile(prompt_tokens, 0.5);
  r.p50 = Quantile(latency, 0.5);
  r.p90 = Quantile(latency, 0.9);
  r.ttft50 = Quantile(ttft, 0.5);
  return r;
}

namespace {

void Count(const PasskeyTrial& t, PasskeyCell& cell) {
  ++cell.trials;
  cell.correct += t.correct ? 1 : 0;
  cell.failed += t.failed ? 1 : 0;
}

}  // namespace

std::vector<PasskeyLengthCells> CountByPosition(const std::vector<PasskeyTrial>& trials,
                                                const std::vector<int64_t>& lengths,
                                                const std::vector<PasskeyPosition>& positions) {
  std::vector<PasskeyLengthCells> out;
  for (int64_t length : lengths) {
    PasskeyLengthCells row;
    row.context_length = length;
    row.all.position = "all";
    for (const PasskeyPosition& p : positions) row.positions.push_back(PasskeyCell{p.name});
    for (const PasskeyTrial& t : trials) {
      if (t.context_length != length || !t.done) continue;
      Count(t, row.all);
      for (PasskeyCell& cell : row.positions) {
        if (cell.position == t.position.name) Count(t, cell);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

std::string FormatPasskeyCell(const PasskeyCell& cell) {
  if (cell.trials <= 0) return "-";
  const Interval ci = WilsonInterval(cell.correct, cell.trials);
  return absl::StrFormat("%d/%d = %.1f%% (%.1f-%.1f%%)", cell.correct, cell.trials,
                         100.0 * static_cast<double>(cell.correct) / static_cast<double>(cell.trials), 100 * ci.low,
                         100 * ci.high);
}

const char* SeedVerdictName(SeedVerdictResult result) {
  switch (result) {
    case SeedVerdictResult::kPass: return "PASS";
    case SeedVerdictResult::kFail: return "FAIL";
    case SeedVerdictResult::kNotRun: break;
  }
  return "NOT RUN";
}

SeedVerdict JudgeSeedProtocol(const std::vector<PasskeyLengthCells>& cells, double target) {
  SeedVerdict v;
  const auto it = std::find_if(cells.begin(), cells.end(), [](const PasskeyLengthCells& c) {
    return c.context_length == kSeedVerdictLength;
  });
  if (it == cells.end() || it->all.trials <= 0) {
    std::vector<int64_t> lengths;
    for (const PasskeyLengthCells& c : cells) lengths.push_back(c.context_length);
    v.line = absl::StrCat("VERDICT: ", kSeedVerdictLength, " tokens: NOT RUN (",
                          it == cells.end() ? "not among the context lengths " : "no trials at ",
                          it == cells.end() ? absl::StrJoin(lengths, ",") : absl::StrCat(kSeedVerdictLength), ")");
    return v;
  }
  const PasskeyCell& all = it->all;
  const Interval ci = WilsonInterval(all.correct, all.trials);
  const double accuracy = static_cast<double>(all.correct) / static_cast<double>(all.trials);
  // The same hair of slack as JudgePasskey: 85/100 meets 0.85.
  const bool pass = accuracy >= target - 1e-9;
  v.result = pass ? SeedVerdictResult::kPass : SeedVerdictResult::kFail;
  v.line = absl::StrFormat("VERDICT: %d tokens: %d/%d = %.1f%% (Wilson %.1f-%.1f%%): %s %g%%: %s",
                           kSeedVerdictLength, all.correct, all.trials, 100 * accuracy, 100 * ci.low, 100 * ci.high,
                           pass ? ">=" : "<", 100 * target, SeedVerdictName(v.result));
  if (all.failed > 0) absl::StrAppend(&v.line, " (", all.failed, " RPC failures counted as wrong)");
  return v;
}

std::string PasskeyProgressLine(size_t done, size_t total, size_t resumed, double weight_done, double weight_total,
                                double elapsed_s) {
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  const std::string eta = weight_done > 0 ? FormatSeconds(elapsed_s * (weight_total - weight_done) / weight_done)
                                          : std::string("?");
  std::string line = absl::StrFormat("pdserve-passkey: %d/%d trials", done, total);
  if (resumed > 0) absl::StrAppend(&line, " (+", resumed, " resumed)");
  absl::StrAppend(&line, absl::StrFormat(", %.2f trials/s, elapsed %s, ETA %s", rate, FormatSeconds(elapsed_s), eta));
  return line;
}

}  // namespace pdserve
