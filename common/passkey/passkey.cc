#include "common/passkey/passkey.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pdserve {
namespace {

// The paper's text (Mohtashami & Jaggi 2023), "pass key" spelled "passkey".
constexpr absl::string_view kTaskDescription =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there.";
constexpr absl::string_view kQuestion = "What is the passkey? The passkey is";
constexpr absl::string_view kFillerSentences[] = {
    "The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.",
};
constexpr int kNumFillerSentences = sizeof(kFillerSentences) / sizeof(kFillerSentences[0]);

// Keeps the filler's stream apart from the passkeys' when base_seed is 0.
constexpr uint64_t kFillerSalt = 0x66696c6c65720001ull;  // "filler"

// SplitMix64 and a rejection-sampled bound: unlike std::shuffle and
// std::uniform_int_distribution, the same on every standard library, so a
// seed means the same passkeys and prompts everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound >= 1, without modulo bias.
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

std::string PasskeySentence(const std::string& passkey) {
  return absl::StrCat("The passkey is ", passkey, ". Remember it. ", passkey, " is the passkey.");
}

bool IsWordChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

absl::StatusOr<PasskeyPosition> ParsePasskeyPosition(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "start") return PasskeyPosition{"start", 0.0};
  if (t == "middle") return PasskeyPosition{"middle", 0.5};
  if (t == "end") return PasskeyPosition{"end", 1.0};
  double depth = 0;
  if (!absl::SimpleAtod(t, &depth) || !(depth >= 0.0 && depth <= 1.0)) {  // !(..) also rejects NaN
    return absl::InvalidArgumentError(
        absl::StrCat("position '", text, "' is not start, middle, end or a depth fraction in [0, 1]"));
  }
  return PasskeyPosition{t, depth};
}

std::string FormatPasskey(int passkey) { return absl::StrFormat("%05d", passkey); }

absl::StatusOr<std::vector<int>> DrawPasskeys(int64_t n_trials, uint64_t base_seed, int64_t context_length) {
  if (n_trials < 0 || n_trials > kPasskeySpace) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_trials ", n_trials, " is not in [0, ", kPasskeySpace,
                     "] (passkeys are distinct 5-digit numbers)"));
  }
  // A partial Fisher-Yates shuffle of 0..99999: without replacement by construction.
  std::vector<int> all(kPasskeySpace);
  std::iota(all.begin(), all.end(), 0);
  SplitMix64 rng(base_seed + static_cast<uint64_t>(context_length));
  for (int64_t i = 0; i < n_trials; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(kPasskeySpace - i)));
    std::swap(all[i], all[j]);
  }
  all.resize(n_trials);
  return all;
}

std::vector<std::string> FillerWords(uint64_t filler_seed, int64_t n_words) {
  std::vector<std::string> words;
  if (n_words <= 0) return words;
  words.reserve(n_words);
  SplitMix64 rng(filler_seed ^ kFillerSalt);
  while (static_cast<int64_t>(words.size()) < n_words) {
    // One block: the five sentences in a seeded order.
    int order[kNumFillerSentences];
    std::iota(order, order + kNumFillerSentences, 0);
    for (int i = kNumFillerSentences - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
    for (int s : order) {
      for (absl::string_view w : absl::StrSplit(kFillerSentences[s], ' ')) {
        if (static_cast<int64_t>(words.size()) == n_words) return words;
        words.emplace_back(w);
      }
    }
  }
  return words;
}

PasskeyPrompt BuildPasskeyPrompt(uint64_t filler_seed, int64_t filler_words, double depth,
                                 const std::string& passkey) {
  const std::vector<std::string> words = FillerWords(filler_seed, filler_words);
  const int64_t n = static_cast<int64_t>(words.size());
  // Sentence boundaries: 0, n, and after every word that ends a sentence.
  const double want = std::clamp(depth, 0.0, 1.0) * static_cast<double>(n);
  int64_t best = 0;
  for (int64_t b = 1; b <= n; ++b) {
    const bool boundary = b == n || (!words[b - 1].empty() && words[b - 1].back() == '.');
    if (boundary && std::abs(static_cast<double>(b) - want) < std::abs(static_cast<double>(best) - want)) best = b;
  }

  PasskeyPrompt p;
  p.filler_words = n;
  p.filler_words_before = best;
  // The paper joins its parts with newlines; empty filler parts are left out
  // rather than leaving blank lines.
  p.text = std::string(kTaskDescription);
  p.text += '\n';
  if (best > 0) {
    p.text += absl::StrJoin(words.begin(), words.begin() + best, " ");
    p.text += '\n';
  }
  p.passkey_offset = p.text.size();
  p.text += PasskeySentence(passkey);
  p.text += '\n';
  if (best < n) {
    p.text += absl::StrJoin(words.begin() + best, words.end(), " ");
    p.text += '\n';
  }
  absl::StrAppend(&p.text, kQuestion);
  return p;
}

namespace {

// The token count of the prompt with a given number of filler words.
using WordCounter = std::function<absl::StatusOr<int64_t>(int64_t words)>;

// Filler word counts around the target: f(lo) <= context_length < f(hi)
// once hi >= 0 (f = the token count).
struct WordBracket {
  int64_t lo = 0, flo = 0, hi = -1, fhi = 0;
};

// Grows lo from 0 filler words (f(0) = `c0` tokens, `fixed_words` words of
// fixed text) until a count passes context_length (hi is set) or lands on it.
absl::Status BracketWordCount(int64_t context_length, int64_t c0, int64_t fixed_words, const WordCounter& count,
                              WordBracket& b) {
  b = WordBracket{0, c0, -1, 0};
  // The first guess takes tokens per word from the fixed text; later ones
  // from the filler measured so far.
  double per_word = std::max(static_cast<double>(c0) / std::max<int64_t>(fixed_words, 1), 1e-3);
  // A counter that stops growing would make the search run forever.
  const int64_t max_words = 16 * context_length + 64;
  while (b.hi < 0 && b.flo < context_length) {
    // Aim one word past the estimate so the target is usually bracketed at once.
    const double step = std::ceil(static_cast<double>(context_length - b.flo) / per_word) + 1;
    const int64_t next = b.lo + static_cast<int64_t>(std::min(step, static_cast<double>(max_words)));
    if (next > max_words) {
      return absl::InternalError(absl::StrCat("the token count stays at ", b.flo, " with ", b.lo,
                                              " filler words: the counter does not grow with the text"));
    }
    absl::StatusOr<int64_t> f = count(next);
    if (!f.ok()) return f.status();
    if (*f <= context_length) {
      b.lo = next;
      b.flo = *f;
      if (b.flo > c0) per_word = static_cast<double>(b.flo - c0) / static_cast<double>(b.lo);
    } else {
      b.hi = next;
      b.fhi = *f;
    }
  }
  return absl::OkStatus();
}

// Narrows a bracket until hi = lo + 1 (or f(lo) hits context_length):
// interpolate (the count is nearly linear in words), then probe the
// neighbour on the far side, which usually closes the bracket; every third
// probe bisects so an uneven count still converges in log steps.
absl::Status NarrowWordBracket(int64_t context_length, const WordCounter& count, WordBracket& b) {
  int probe = 0;
  bool step_up = false, step_down = false;
  while (b.hi >= 0 && b.hi - b.lo > 1 && b.flo < context_length) {
    int64_t m;
    if (probe % 3 == 2) {
      m = b.lo + (b.hi - b.lo) / 2;
    } else if (step_up) {
      m = b.lo + 1;
    } else if (step_down) {
      m = b.hi - 1;
    } else {
      const double frac = static_cast<double>(context_length - b.flo) / static_cast<double>(b.fhi - b.flo);
      m = b.lo + static_cast<int64_t>(std::floor(frac * static_cast<double>(b.hi - b.lo)));
    }
    m = std::clamp(m, b.lo + 1, b.hi - 1);
    ++probe;
    absl::StatusOr<int64_t> f = count(m);
    if (!f.ok()) return f.status();
    const bool was_step = step_up || step_down;
    step_up = step_down = false;
    if (*f <= context_length) {
      b.lo = m;
      b.flo = *f;
      step_up = !was_step;
    } else {
      b.hi = m;
      b.fhi = *f;
      step_down = !was_step;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PasskeyPrompt> SizePasskeyPrompt(int64_t context_length, double depth, const std::string& passkey,
                                                const TokenCounter& count_tokens, int* calls,
                                                std::optional<uint64_t> filler_seed) {
  const uint64_t seed = filler_seed.value_or(static_cast<uint64_t>(context_length));
  int n_calls = 0;
  const WordCounter count = [&](int64_t words) -> absl::StatusOr<int64_t> {
    ++n_calls;
    if (calls != nullptr) *calls = n_calls;
    return count_tokens(BuildPasskeyPrompt(seed, words, depth, passkey).text);
  };

  absl::StatusOr<int64_t> c0 = count(0);
  if (!c0.ok()) return c0.status();
  if (*c0 > context_length) {
    return absl::InvalidArgumentError(absl::StrCat("context length ", context_length,
                                                   " is below the passkey prompt's minimum: without filler it is ",
                                                   *c0, " tokens"));
  }
  const int64_t fixed_words = static_cast<int64_t>(
      std::vector<absl::string_view>(absl::StrSplit(BuildPasskeyPrompt(seed, 0, depth, passkey).text,
                                                    absl::ByAnyChar(" \n"), absl::SkipEmpty()))
          .size());
  WordBracket bracket;
  if (absl::Status s = BracketWordCount(context_length, *c0, fixed_words, count, bracket); !s.ok()) return s;
  if (absl::Status s = NarrowWordBracket(context_length, count, bracket); !s.ok()) return s;
  PasskeyPrompt p = BuildPasskeyPrompt(seed, bracket.lo, depth, passkey);
  p.tokens = bracket.flo;
  return p;
}

std::optional<std::string> ExtractPasskeyAnswer(absl::string_view generated) {
  // A \b\d{5}\b match is exactly a maximal run of 5 digits whose neighbours
  // are not word characters (a digit neighbour would extend the run).
  const size_t n = generated.size();
  size_t i = 0;
  while (i < n) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(generated[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && absl::ascii_isdigit(static_cast<unsigned char>(generated[j]))) ++j;
    const bool left_ok = i == 0 || !IsWordChar(generated[i - 1]);
    const bool right_ok = j == n || !IsWordChar(generated[j]);
    if (j - i == 5 && left_ok && right_ok) return std::string(generated.substr(i, 5));
    i = j;
  }
  return std::nullopt;
}

Interval WilsonInterval(int64_t successes, int64_t trials) {
  if (trials <= 0) return Interval{0.0, 1.0};
  constexpr double kZ = 1.959963984540054;  // the 97.5th percentile of N(0, 1)
  const double n = static_cast<double>(trials);
  const double p = static_cast<double>(successes) / n;
  const double z2 = kZ * kZ;
  const double denom = 1.0 + z2 / n;
  const double center = (p + z2 / (2.0 * n)) / denom;
  const double half = kZ / denom * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n));
  // Rounding can put an end a hair outside [0, 1] at p = 0 or 1.
  return Interval{std::max(0.0, center - half), std::min(1.0, center + half)};
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(pos));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (pos - static_cast<double>(below)) * (values[above] - values[below]);
}

Verdict JudgePasskey(const LengthOutcome& o, double target, absl::string_view position_name) {
  Verdict v;
  if (o.trials <= 0) {
    v.line = absl::StrCat("WARNING: no trials ran at ", o.context_length, " tokens");
    return v;
  }
  if (o.failed >= o.trials) {
    v.line = absl::StrCat("WARNING: all ", o.trials, " trials at ", o.context_length,
                          " tokens failed with RPC errors (listed above): no accuracy was measured");
    return v;
  }
  const double accuracy = static_cast<double>(o.correct) / static_cast<double>(o.trials);
  const Interval ci = WilsonInterval(o.correct, o.trials);
  const std::string what = absl::StrFormat(
      "passkey retrieval at %d tokens (position %s): %d/%d correct = %.1f%% (95%% CI %.1f-%.1f%%)", o.context_length,
      std::string(position_name), o.correct, o.trials, 100 * accuracy, 100 * ci.low, 100 * ci.high);
  // A hair of slack so 17/20 meets 0.85 whatever the rounding.
  v.pass = accuracy >= target - 1e-9;
  if (v.pass) {
    v.line = absl::StrFormat("PASS: %s >= target %.1f%%", what, 100 * target);
  } else {
    v.line = absl::StrFormat("WARNING: %s < target %.1f%%.", what, 100 * target);
    const int64_t answered = o.trials - o.failed;
    if (o.answers_with_number == 0) {
      absl::StrAppend(&v.line, " None of the ", answered,
                      " answers holds a 5-digit number at all, which is what an untrained (random-weight) model "
                      "produces: the model is the likely cause, not this client (the prompts are sized and the "
                      "passkeys placed as asked; --json-out has every answer).");
    } else if (accuracy <= 0.1) {
      absl::StrAppend(&v.line,
                      " Accuracy near 0 is what an untrained or random model scores: the model is the likely cause, "
                      "not this client (--json-out has every answer).");
    } else {
      absl::StrAppend(&v.line,
                      " The model answers with 5-digit numbers but misses the passkey at this length (a retrieval "
                      "limit of the model; with few trials, see the interval).");
    }
  }
  if (o.failed > 0) absl::StrAppend(&v.line, " (", o.failed, " RPC failures counted as wrong.)");
  return v;
}

}  // namespace pdserve
