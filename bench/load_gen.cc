#include "bench/load_gen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pdserve::bench {

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SplitMix64::NextOpenUnit() {
  // 53 random bits, shifted by half a step: (k + 0.5) / 2^53 is in (0, 1).
  return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
}

int64_t SplitMix64::NextInRange(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (span == 0) return static_cast<int64_t>(Next());  // the whole int64 range
  // Reject the top partial block so every value is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x = Next();
  while (x >= limit) x = Next();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % span);
}

uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  SplitMix64 a(seed ^ (stream * 0xd1b54a32d192ed03ULL));
  a.Next();
  return a.Next() ^ stream;
}

absl::StatusOr<std::vector<double>> PoissonArrivals(int64_t n, double rate, uint64_t seed) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("request count ", n, " is negative"));
  if (!(rate > 0)) return absl::InvalidArgumentError(absl::StrCat("request rate ", rate, " is not > 0"));
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return out;
  SplitMix64 rng(seed);
  double t = 0;
  for (int64_t i = 1; i < n; ++i) {
    t += -std::log(rng.NextOpenUnit()) / rate;
    out[static_cast<size_t>(i)] = t;
  }
  return out;
}

namespace {

absl::StatusOr<int64_t> ParsePositive(absl::string_view text, absl::string_view what) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", text, "' is not a positive integer"));
  }
  return v;
}

}  // namespace

absl::StatusOr<LengthRange> ParseLengthRange(const std::string& text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() == 1) {
    absl::StatusOr<int64_t> v = ParsePositive(parts[0], "length");
    if (!v.ok()) return v.status();
    return LengthRange{*v, *v};
  }
  if (parts.size() != 2) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not LO:HI"));
  absl::StatusOr<int64_t> lo = ParsePositive(parts[0], "low end");
  if (!lo.ok()) return lo.status();
  absl::StatusOr<int64_t> hi = ParsePositive(parts[1], "high end");
  if (!hi.ok()) return hi.status();
  if (*lo > *hi) return absl::InvalidArgumentError(absl::StrCat("'", text, "': low end above high end"));
  return LengthRange{*lo, *hi};
}

absl::StatusOr<std::vector<RequestLengths>> ParseLengthsFile(const std::string& contents) {
  std::vector<RequestLengths> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::ByAnyChar(" \t,"), absl::SkipEmpty());
    if (f.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": '", line, "' is not 'INPUT OUTPUT' (two positive integers)"));
    }
    absl::StatusOr<int64_t> in = ParsePositive(f[0], "input length");
    absl::StatusOr<int64_t> outl = ParsePositive(f[1], "output length");
    if (!in.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", in.status().message()));
    if (!outl.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", outl.status().message()));
    out.push_back({*in, *outl});
  }
  if (out.empty()) return absl::InvalidArgumentError("no 'INPUT OUTPUT' line");
  return out;
}

std::vector<RequestLengths> SampleLengths(int64_t n, const LengthRange& input, const LengthRange& output,
                                          uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<RequestLengths> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    RequestLengths r;
    r.input = rng.NextInRange(input.lo, input.hi);
    r.output = rng.NextInRange(output.lo, output.hi);
    out.push_back(r);
  }
  return out;
}

std::vector<RequestLengths> CycleLengths(int64_t n, const std::vector<RequestLengths>& pairs) {
  std::vector<RequestLengths> out;
  if (pairs.empty()) return out;
  for (int64_t i = 0; i < n; ++i) out.push_back(pairs[static_cast<size_t>(i) % pairs.size()]);
  return out;
}

std::vector<uint32_t> PromptIds(int64_t length, int64_t vocab_size, uint64_t seed, int64_t index) {
  SplitMix64 rng(StreamSeed(seed, 0x1000 + static_cast<uint64_t>(index)));
  std::vector<uint32_t> ids;
  ids.reserve(static_cast<size_t>(std::max<int64_t>(length, 0)));
  for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<uint32_t>(rng.NextInRange(0, vocab_size - 1)));
  return ids;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty() || !(p >= 0 && p <= 100)) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double t = rank - static_cast<double>(lo);
  const double a = values[lo], b = values[hi];
  // numpy's _lerp: from the nearer end, so t = 1 gives b exactly.
  return t >= 0.5 ? b - (b - a) * (1 - t) : a + (b - a) * t;
}

Summary Summarize(const std::vector<double>& values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    s.mean = s.median = s.p90 = s.p99 = s.max = s.std = nan;
    return s;
  }
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double ss = 0;
  for (double v : values) ss += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(ss / n);
  s.median = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

std::optional<double> TpotMs(const RequestTiming& t) {
  if (t.output_tokens < 2) return std::nullopt;
  return (t.e2el_ms - t.ttft_ms) / static_cast<double>(t.output_tokens - 1);
}

absl::StatusOr<Slo> ParseSlo(const std::string& text) {
  Slo slo;
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(" ,\t"), absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits(':', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not KEY:MS (ttft:500, tpot:50, e2el:10000)"));
    }
    const std::string key = absl::AsciiStrToLower(kv[0]);
    double ms = 0;
    if (!absl::SimpleAtod(kv[1], &ms) || !(ms > 0) || std::isinf(ms)) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "': the bound must be a positive number of ms"));
    }
    std::optional<double>* slot = nullptr;
    if (key == "ttft") {
      slot = &slo.ttft_ms;
    } else if (key == "tpot") {
      slot = &slo.tpot_ms;
    } else if (key == "e2el") {
      slot = &slo.e2el_ms;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown SLO '", kv[0], "' (use ttft, tpot or e2el)"));
    }
    if (slot->has_value()) return absl::InvalidArgumentError(absl::StrCat("SLO '", key, "' given twice"));
    *slot = ms;
  }
  if (slo.empty()) return absl::InvalidArgumentError("no SLO given (ttft:MS, tpot:MS, e2el:MS)");
  return slo;
}

bool MeetsSlo(const RequestTiming& t, const Slo& slo) {
  if (!t.ok) return false;
  if (slo.ttft_ms && !(t.ttft_ms <= *slo.ttft_ms)) return false;
  if (slo.tpot_ms && !(TpotMs(t).value_or(0.0) <= *slo.tpot_ms)) return false;
  if (slo.e2el_ms && !(t.e2el_ms <= *slo.e2el_ms)) return false;
  return true;
}

int64_t CountGood(const std::vector<RequestTiming>& timings, const Slo& slo) {
  return std::count_if(timings.begin(), timings.end(), [&](const RequestTiming& t) { return MeetsSlo(t, slo); });
}

RunMetrics ComputeRunMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s, const Slo& slo) {
  RunMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::vector<RequestTiming> ok;
  for (const RequestOutcome& o : outcomes) {
    if (!o.timing.ok) {
      ++m.failed;
      ++m.failed_by_code[o.error_code.empty() ? "UNKNOWN" : o.error_code];
      continue;
    }
    ++m.completed;
    m.total_input_tokens += o.input_tokens;
    m.total_output_tokens += o.timing.output_tokens;
    if (o.timing.output_tokens > 0) ttft.push_back(o.timing.ttft_ms);
    if (std::optional<double> t = TpotMs(o.timing)) tpot.push_back(*t);
    itl.insert(itl.end(), o.timing.itl_ms.begin(), o.timing.itl_ms.end());
    e2el.push_back(o.timing.e2el_ms);
    ok.push_back(o.timing);
  }
  const auto per_s = [&](double v) { return duration_s > 0 ? v / duration_s : 0.0; };
  m.request_throughput = per_s(static_cast<double>(m.completed));
  m.output_throughput = per_s(static_cast<double>(m.total_output_tokens));
  m.total_token_throughput = per_s(static_cast<double>(m.total_input_tokens + m.total_output_tokens));
  if (!slo.empty()) {
    m.good = CountGood(ok, slo);
    m.goodput = per_s(static_cast<double>(*m.good));
  }
  m.ttft_ms = Summarize(ttft);
  m.tpot_ms = Summarize(tpot);
  m.itl_ms = Summarize(itl);
  m.e2el_ms = Summarize(e2el);
  return m;
}

void StreamTimer::OnTokens(int64_t tokens, Clock::time_point now) {
  RequestTiming& t = out_->timing;
  const double ms = std::chrono::duration<double, std::milli>(now - (t.output_tokens == 0 ? sent_ : last_)).count();
  if (t.output_tokens == 0) {
    t.ttft_ms = ms;
  } else {
    t.itl_ms.push_back(ms);
  }
  last_ = now;
  t.output_tokens += tokens;
  ++out_->messages;
}

void StreamTimer::Finish(Clock::time_point now) {
  out_->timing.e2el_ms = std::chrono::duration<double, std::milli>(now - sent_).count();
}

std::vector<std::string> SseParser::Feed(absl::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    const bool lf_after_cr = c == '\n' && after_cr_;
    after_cr_ = c == '\r';
    if (lf_after_cr) continue;  // the LF of a CRLF: the line already ended
    if (c != '\n' && c != '\r') {
      partial_.push_back(c);
      continue;
    }
    Line(partial_, &events);
    partial_.clear();
  }
  return events;
}

void SseParser::Line(absl::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (!absl::ConsumePrefix(&line, "data")) return;  // a comment or another field
  if (!line.empty() && !absl::ConsumePrefix(&line, ":")) return;  // "database: x" is not data
  absl::ConsumePrefix(&line, " ");
  if (has_data_) data_.push_back('\n');
  data_.append(line.data(), line.size());
  has_data_ = true;
}

}  // namespace pdserve::bench
