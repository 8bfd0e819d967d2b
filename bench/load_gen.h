// The load generator's logic without gRPC, for pdserve-bench and its unit
// test: a seeded random stream, arrival schedules (Poisson), prompt and output
// lengths (fixed, uniform, or from a file), deterministic prompt ids,
// percentiles (numpy's default linear interpolation), summary statistics, the
// per-request metrics (TTFT, TPOT, ITL, E2EL) and goodput under SLOs; the
// Backend interface one request goes through (bench/backends.h has the gRPC
// and the OpenAI-HTTP ones), the stream timer they share, and the SSE parser
// of the HTTP backend.
//
// Everything random comes from SplitMix64 (no std::*_distribution, whose
// output differs between standard libraries), so a seed gives the same
// schedule, lengths and prompts on every platform.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve::bench {

// SplitMix64 (Steele, Lea & Flood, 2014): small, fast, and every seed
// (including 0) gives a full-period stream.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in (0, 1): never 0, so -log(u) is finite.
  double NextOpenUnit();
  // Uniform integer in [lo, hi] (inclusive), unbiased (rejection); lo <= hi.
  int64_t NextInRange(int64_t lo, int64_t hi);

 private:
  uint64_t state_;
};

// An independent stream for (seed, stream): the arrivals, the lengths and
// each prompt draw from different streams of the one --seed.
uint64_t StreamSeed(uint64_t seed, uint64_t stream);

// Send times, in seconds from the start of the run, of n requests arriving as
// a Poisson process of `rate` requests/s: the first at 0, then independent
// exponential gaps of mean 1/rate (as `vllm bench serve` does). rate = +inf
// gives all zeros (everything at once). InvalidArgument for rate <= 0 or NaN,
// or n < 0.
absl::StatusOr<std::vector<double>> PoissonArrivals(int64_t n, double rate, uint64_t seed);

// An inclusive range of lengths in tokens; fixed when lo == hi.
struct LengthRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

// "N" (fixed) or "LO:HI" (uniform on [LO, HI]), every value >= 1 and
// LO <= HI. InvalidArgument with the reason otherwise.
absl::StatusOr<LengthRange> ParseLengthRange(const std::string& text);

// One request's lengths: the prompt's tokens and the tokens to generate.
struct RequestLengths {
  int64_t input = 0;
  int64_t output = 0;
  bool operator==(const RequestLengths& o) const { return input == o.input && output == o.output; }
};

// A lengths file: one "INPUT OUTPUT" pair per line (separated by spaces, tabs
// or a comma; both >= 1); blank lines and lines starting with '#' are skipped.
// InvalidArgument names the line number of a bad line, or says the file
// holds no pair.
absl::StatusOr<std::vector<RequestLengths>> ParseLengthsFile(const std::string& contents);

// n requests' lengths drawn independently and uniformly from the two ranges
// (seeded).
std::vector<RequestLengths> SampleLengths(int64_t n, const LengthRange& input, const LengthRange& output,
                                          uint64_t seed);

// n requests' lengths taken from `pairs` in file order, starting over at the
// first pair when n is larger (so a file of 100 lines with n = 250 gives
// lines 1-100, 1-100, 1-50). `pairs` must not be empty.
std::vector<RequestLengths> CycleLengths(int64_t n, const std::vector<RequestLengths>& pairs);

// A prompt of `length` token ids, each uniform in [0, vocab_size), a pure
// function of (seed, index) so request i always sends the same prompt.
std::vector<uint32_t> PromptIds(int64_t length, int64_t vocab_size, uint64_t seed, int64_t index);

// The p-th percentile (p in [0, 100]) with linear interpolation between
// closest ranks: numpy.percentile's default ("linear"): with the values
// sorted, rank r = p/100 * (n - 1), and the result interpolates between
// the floor(r)-th and ceil(r)-th values. NaN for no values.
double Percentile(std::vector<double> values, double p);

// Mean, median, p90, p99, max and population std of a sample (all NaN and
// count 0 when empty).
struct Summary {
  int64_t count = 0;
  double mean = 0;
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
  double std = 0;
};
Summary Summarize(const std::vector<double>& values);

// What the client saw of one request, times in ms from the moment it was
// sent (steady_clock).
struct RequestTiming {
  bool ok = false;
  int64_t output_tokens = 0;  // tokens received in the stream
  double ttft_ms = 0;         // to the first message holding a token
  double e2el_ms = 0;         // to the end of the stream (its status)
  // One gap per message holding tokens after the first such message: the
  // time since the previous token-holding message. A message with k tokens
  // is one gap (as vllm counts a streamed chunk), not k.
  std::vector<double> itl_ms;
};

// TPOT excluding the first token: (e2el - ttft) / (output_tokens - 1); no
// value (nullopt) for fewer than 2 tokens.
std::optional<double> TpotMs(const RequestTiming& t);

// Service-level objectives for goodput; each one given must be met.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// "ttft:MS tpot:MS e2el:MS" in any order and subset (items separated by
// spaces or commas), each MS a positive number. InvalidArgument names an
// unknown key, a repeated key, or a bad value.
absl::StatusOr<Slo> ParseSlo(const std::string& text);

// A successful request meets the SLO when ttft_ms <= the TTFT bound, TPOT <=
// the TPOT bound and e2el_ms <= the E2EL bound, for each bound given. A request
// with fewer than 2 tokens has TPOT 0 here (as in vllm). A failed request never
// meets it.
bool MeetsSlo(const RequestTiming& t, const Slo& slo);

// Good requests (MeetsSlo) among `timings`.
int64_t CountGood(const std::vector<RequestTiming>& timings, const Slo& slo);

// The aggregate of a run, over the successful requests.
struct RunMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> failed_by_code;  // status code name -> count
  int64_t total_input_tokens = 0;                // of successful requests
  int64_t total_output_tokens = 0;               // received, successful requests
  double duration_s = 0;
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output tokens) / duration
  std::optional<int64_t> good;        // with an SLO
  std::optional<double> goodput;      // good / duration
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

// One request's outcome as the aggregate needs it.
struct RequestOutcome {
  RequestTiming timing;
  int64_t input_tokens = 0;
  std::string error_code;  // "" when ok
};

// Aggregates the outcomes of a run that took duration_s (> 0 for the
// throughputs; 0 gives throughputs of 0).
RunMetrics ComputeRunMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s, const Slo& slo);

// ---- Backends: the protocol one request goes over.

using Clock = std::chrono::steady_clock;

// One request as every backend sends it: token ids in, a fixed output length.
struct BackendRequest {
  std::string request_id;
  std::vector<uint32_t> prompt_ids;
  int64_t max_tokens = 0;
  float temperature = 0;  // <= 0: greedy
  float top_p = 1;        // the nucleus mass; 1 keeps every id
  uint64_t seed = 0;
  bool ignore_eos = true;
  double deadline_s = 0;  // 0 = none
};

// What the client saw of one request.
struct BackendResult {
  RequestTiming timing;
  int64_t messages = 0;    // stream messages (SSE events) holding tokens
  std::string error_code;  // "" when ok: a gRPC code name, or HTTP_<status>
  std::string error;
  std::string finish_reason;
  // The server's own report of the request, by field name: the router's
  // Usage over gRPC (ttft_ns, kv_handoff_bytes, ...), the OpenAI usage block
  // over HTTP (prompt_tokens, completion_tokens, total_tokens).
  std::optional<nlohmann::ordered_json> usage;
};

// A protocol pdserve-bench measures the server through. Run is called from
// many threads at once.
class Backend {
 public:
  virtual ~Backend() = default;
  // Sends `req`, reads its stream to the end, and fills `out` with times in
  // ms from `sent` (taken by the caller just before the call).
  virtual void Run(const BackendRequest& req, Clock::time_point sent, BackendResult* out) = 0;
};

// Times the token-holding messages of one stream from `sent`: the first one
// sets TTFT, each later one adds an ITL gap (one per message, however many
// tokens it holds).
class StreamTimer {
 public:
  StreamTimer(Clock::time_point sent, BackendResult* out) : sent_(sent), last_(sent), out_(out) {}
  // A message holding `tokens` (>= 1) tokens arrived at `now`.
  void OnTokens(int64_t tokens, Clock::time_point now);
  // The stream ended at `now`; sets e2el_ms.
  void Finish(Clock::time_point now);

 private:
  Clock::time_point sent_, last_;
  BackendResult* out_;
};

// Splits a Server-Sent Events byte stream (text/event-stream) into the data
// of its events, whatever the bytes' split into reads: lines end in LF, CRLF
// or CR; "data:" lines (one leading space dropped) of one event join with
// LF; a blank line ends the event; comment lines (":") and other fields are
// skipped; an event without data yields nothing.
class SseParser {
 public:
  // The data of each event completed by `bytes`, in order.
  std::vector<std::string> Feed(absl::string_view bytes);

 private:
  void Line(absl::string_view line, std::vector<std::string>* events);
  std::string partial_;  // the unfinished last line
  bool after_cr_ = false;  // the last byte was CR: a following LF is the same line end
  std::string data_;
  bool has_data_ = false;
};

}  // namespace pdserve::bench
