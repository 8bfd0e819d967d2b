// pdserve-passkey: passkey retrieval (Mohtashami & Jaggi, 2023) as a batch
// client of the public API (pdserve.v1.Generator). For each context length
// it sizes the prompt with the router's Tokenize RPC, runs n trials (greedy)
// on a small pool of threads, and prints a table, a headline for the largest
// length, and optionally every trial as JSON. Uses only the public proto.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cli/cli_util.h"
#include "common/cli/finish_reason.h"
#include "common/cli/progress.h"
#include "common/net/grpc_security.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "common/passkey/passkey.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051", "The router's address, host:port.");
ABSL_FLAG(std::string, context_lengths, "1024,2048,4096",
          "Prompt lengths in tokens (the model's tokenizer, counted by the router), comma-separated. "
          "Each plus --max-new-tokens must fit the model's max_context.");
ABSL_FLAG(int64_t, n_trials, 5, "Trials (distinct passkeys) per context length.");
ABSL_FLAG(std::string, position, "middle",
          "Where the passkey goes: start, middle, end, or a depth fraction in [0, 1] (0 = start).");
ABSL_FLAG(uint64_t, seed, 0, "Base seed: the passkeys of length L come from seed + L.");
ABSL_FLAG(double, target, 0.85, "Accuracy the largest length should reach, in [0, 1].");
ABSL_FLAG(int64_t, concurrency, 4, "Trials in flight at once (one thread and one stream each).");
ABSL_FLAG(std::string, json_out, "", "Write every trial and the per-length summary to this JSON file.");
ABSL_FLAG(bool, require_target, false, "Exit 3 when the largest length misses --target (default: exit 0 either way).");
ABSL_FLAG(int64_t, max_new_tokens, 16, "Tokens generated per trial (greedy).");
ABSL_FLAG(double, deadline_s, 0, "Deadline of each RPC in seconds; 0 = none.");

namespace {

using pdserve::Die;
using Clock = std::chrono::steady_clock;

struct Trial {
  // Set before the run.
  int64_t context_length = 0;
  int index = 0;
  std::string passkey;
  pdserve::PasskeyPrompt prompt;
  // Set by the run.
  int64_t prompt_tokens = -1;        // Tokenize's count of this trial's prompt
  int64_t usage_prompt_tokens = -1;  // the router's Usage, when the call succeeded
  std::string answer;
  std::vector<uint32_t> answer_ids;  // the generated token ids, in order
  std::optional<std::string> extracted;
  bool correct = false;
  bool failed = false;
  std::string error;
  std::optional<double> ttft_ms;
  double latency_ms = 0;
  int64_t tokens = 0;
  std::string finish_reason;
};

struct Options {
  std::string router;
  int64_t max_new_tokens = 16;
  double deadline_s = 0;
};

void SetDeadline(grpc::ClientContext* ctx, double deadline_s) {
  if (deadline_s > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(deadline_s * 1e6)));
  }
}

std::string RpcError(const grpc::Status& status) {
  return absl::StrCat(pdserve::GrpcCodeName(status.error_code()), ": ", status.error_message());
}

// The router's Tokenize as the library's token counter.
absl::StatusOr<int64_t> CountTokens(pdserve::v1::Generator::Stub* stub, double deadline_s, const std::string& text) {
  pdserve::v1::TokenizeRequest req;
  req.set_text(text);
  pdserve::v1::TokenizeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline_s);
  const grpc::Status status = stub->Tokenize(&ctx, req, &resp);
  if (!status.ok()) {
    return absl::Status(pdserve::FromGrpcStatus(status).code(), absl::StrCat("Tokenize: ", RpcError(status)));
  }
  return static_cast<int64_t>(resp.token_ids_size());
}

void RunTrial(pdserve::v1::Generator::Stub* stub, const Options& opt, Trial* t) {
  absl::StatusOr<int64_t> counted = CountTokens(stub, opt.deadline_s, t->prompt.text);
  if (counted.ok()) t->prompt_tokens = *counted;

  pdserve::v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("passkey-", t->context_length, "-", t->index));
  req.set_text(t->prompt.text);
  pdserve::v1::SamplingParams* s = req.mutable_sampling();
  s->set_max_new_tokens(static_cast<uint32_t>(opt.max_new_tokens));
  s->set_temperature(0.0f);  // greedy, as the protocol says

  grpc::ClientContext ctx;
  SetDeadline(&ctx, opt.deadline_s);
  const Clock::time_point start = Clock::now();
  std::unique_ptr<grpc::ClientReader<pdserve::v1::GenerateResponse>> reader = stub->Generate(&ctx, req);
  pdserve::v1::GenerateResponse resp;
  int64_t received = 0;
  std::optional<pdserve::v1::Usage> usage;
  while (reader->Read(&resp)) {
    t->answer += resp.text();
    t->answer_ids.insert(t->answer_ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    received += resp.token_ids_size();
    if (resp.has_usage()) usage = resp.usage();
    if (resp.finish_reason() != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
      t->finish_reason = pdserve::FinishReasonName(resp.finish_reason());
    }
  }
  const grpc::Status status = reader->Finish();
  t->latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  t->tokens = usage ? static_cast<int64_t>(usage->generated_tokens()) : received;
  if (usage) {
    t->ttft_ms = static_cast<double>(usage->ttft_ns()) / 1e6;
    t->usage_prompt_tokens = usage->prompt_tokens();
  }
  if (!status.ok()) {
    t->failed = true;
    t->error = RpcError(status);
    return;
  }
  // Only the new text: the prompt holds the passkey too.
  t->extracted = pdserve::ExtractPasskeyAnswer(t->answer);
  t->correct = t->extracted.has_value() && *t->extracted == t->passkey;
}

std::string ProgressLine(size_t done, size_t total, double elapsed_s) {
  return absl::StrFormat("pdserve-passkey: %d/%d trials, %s", done, total,
                         pdserve::ProgressStats(done, total, elapsed_s, "trials"));
}

nlohmann::ordered_json NullIfEmpty(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

std::string Ms(double v) { return v == v ? absl::StrFormat("%.1f", v) : "-"; }  // NaN: no successful trial

absl::StatusOr<std::vector<int64_t>> ParseLengths(const std::string& text) {
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

// ---- The run's configuration: the flags, checked (bad values exit 2).
struct Config {
  Options opt;
  std::vector<int64_t> lengths;
  pdserve::PasskeyPosition position;
  int64_t n_trials = 0;
  double target = 0;
  int64_t concurrency = 0;
  uint64_t seed = 0;
  std::string json_out;
};

Config ParseConfig() {
  Config c;
  Options& opt = c.opt;
  opt.router = absl::GetFlag(FLAGS_router);
  opt.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  opt.deadline_s = absl::GetFlag(FLAGS_deadline_s);
  absl::StatusOr<std::vector<int64_t>> lengths = ParseLengths(absl::GetFlag(FLAGS_context_lengths));
  if (!lengths.ok()) Die("--context-lengths: " + std::string(lengths.status().message()), 2);
  c.lengths = *std::move(lengths);
  absl::StatusOr<pdserve::PasskeyPosition> position = pdserve::ParsePasskeyPosition(absl::GetFlag(FLAGS_position));
  if (!position.ok()) Die("--position: " + std::string(position.status().message()), 2);
  c.position = *std::move(position);
  c.n_trials = absl::GetFlag(FLAGS_n_trials);
  if (c.n_trials < 1 || c.n_trials > pdserve::kPasskeySpace) Die("--n-trials must be in [1, 100000]", 2);
  c.target = absl::GetFlag(FLAGS_target);
  if (!(c.target >= 0 && c.target <= 1)) Die("--target must be in [0, 1]", 2);
  c.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (c.concurrency < 1 || c.concurrency > 1024) Die("--concurrency must be in [1, 1024]", 2);
  if (opt.max_new_tokens < 1 || opt.max_new_tokens > std::numeric_limits<uint32_t>::max()) {
    Die("--max-new-tokens must be in [1, 2^32)", 2);
  }
  if (!(opt.deadline_s >= 0)) Die("--deadline-s must be >= 0 (0 = none)", 2);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.json_out = absl::GetFlag(FLAGS_json_out);
  return c;
}

// ---- The trials.

// Sizes one prompt per length (the filler is the same for all its trials;
// only the passkey's digits change, which a BPE may split into a token more
// or less: each trial's own count is recorded), then builds every prompt.
std::vector<Trial> BuildTrials(pdserve::v1::Generator::Stub* stub, const Config& c) {
  std::vector<Trial> trials;
  for (int64_t length : c.lengths) {
    absl::StatusOr<std::vector<int>> keys = pdserve::DrawPasskeys(c.n_trials, c.seed, length);
    if (!keys.ok()) Die(keys.status(), 2);
    int calls = 0;
    const pdserve::TokenCounter counter = [&](const std::string& text) {
      return CountTokens(stub, c.opt.deadline_s, text);
    };
    absl::StatusOr<pdserve::PasskeyPrompt> sized = pdserve::SizePasskeyPrompt(
        length, c.position.depth, pdserve::FormatPasskey(keys->front()), counter, &calls);
    if (!sized.ok()) {
      if (sized.status().code() == absl::StatusCode::kInvalidArgument) {
        Die(absl::StrCat("--context-lengths: ", sized.status().message()), 2);
      }
      Die(absl::StrCat("cannot size the prompts through the router at ", c.opt.router, ": ", sized.status().message()),
          1);
    }
    std::fprintf(stderr, "pdserve-passkey: length %lld: %lld prompt tokens (%lld filler words), %d Tokenize calls\n",
                 static_cast<long long>(length), static_cast<long long>(sized->tokens),
                 static_cast<long long>(sized->filler_words), calls);
    for (int i = 0; i < static_cast<int>(keys->size()); ++i) {
      Trial t;
      t.context_length = length;
      t.index = i;
      t.passkey = pdserve::FormatPasskey((*keys)[i]);
      t.prompt = pdserve::BuildPasskeyPrompt(length, sized->filler_words, c.position.depth, t.passkey);
      trials.push_back(std::move(t));
    }
  }
  return trials;
}

// Runs every trial on a fixed pool of `concurrency` workers that pull trials
// in order, each one sync stream, with progress on stderr. Returns the
// elapsed seconds.
double RunTrials(pdserve::v1::Generator::Stub* stub, const Options& opt, int64_t concurrency,
                 std::vector<Trial>* trials) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<std::thread> workers;
  const size_t n = trials->size();
  const size_t n_workers = std::min<size_t>(static_cast<size_t>(concurrency), n);
  const Clock::time_point run_start = Clock::now();
  for (size_t w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        RunTrial(stub, opt, &(*trials)[i]);
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        cv.notify_all();
      }
    });
  }
  const double elapsed_s = pdserve::WaitWithProgress(
      mu, cv, done, n, run_start, [&](size_t d, double elapsed) { return ProgressLine(d, n, elapsed); });
  for (std::thread& w : workers) w.join();
  return elapsed_s;
}

// ---- The report.

// One context length's outcome and statistics.
struct Row {
  pdserve::LengthOutcome outcome;
  double prompt_tokens_median = 0;
  double p50 = 0, p90 = 0, ttft50 = 0;
  std::string first_error;
};

Row SummarizeLength(int64_t length, const std::vector<Trial>& trials) {
  Row r;
  r.outcome.context_length = length;
  std::vector<double> latency, ttft, prompt_tokens;
  for (const Trial& t : trials) {
    if (t.context_length != length) continue;
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
  r.prompt_tokens_median = pdserve::Quantile(prompt_tokens, 0.5);
  r.p50 = pdserve::Quantile(latency, 0.5);
  r.p90 = pdserve::Quantile(latency, 0.9);
  r.ttft50 = pdserve::Quantile(ttft, 0.5);
  return r;
}

// The table of every length, then the first error of each length that had
// failures.
void PrintTable(const Config& c, const std::vector<Row>& rows) {
  std::printf("passkey retrieval, position %s (depth %.3g), %lld trials per length, greedy, max_new_tokens %lld, "
              "seed %llu\n",
              c.position.name.c_str(), c.position.depth, static_cast<long long>(c.n_trials),
              static_cast<long long>(c.opt.max_new_tokens), static_cast<unsigned long long>(c.seed));
  std::printf("%8s %8s %6s %6s %7s %8s %15s %7s %10s %10s %10s\n", "length", "prompt", "trials", "failed", "correct",
              "accuracy", "95% CI (Wilson)", "5-digit", "p50 ms", "p90 ms", "TTFT p50");
  for (const Row& r : rows) {
    const pdserve::LengthOutcome& o = r.outcome;
    const pdserve::Interval ci = pdserve::WilsonInterval(o.correct, o.trials);
    const std::string prompt_tokens = r.prompt_tokens_median == r.prompt_tokens_median
                                          ? absl::StrCat(static_cast<int64_t>(r.prompt_tokens_median))
                                          : "-";  // NaN: no trial could be counted
    std::printf("%8lld %8s %6lld %6lld %7lld %7.1f%% %15s %7lld %10s %10s %10s\n",
                static_cast<long long>(o.context_length), prompt_tokens.c_str(),
                static_cast<long long>(o.trials), static_cast<long long>(o.failed), static_cast<long long>(o.correct),
                o.trials ? 100.0 * static_cast<double>(o.correct) / static_cast<double>(o.trials) : 0.0,
                absl::StrFormat("%.1f-%.1f%%", 100 * ci.low, 100 * ci.high).c_str(),
                static_cast<long long>(o.answers_with_number), Ms(r.p50).c_str(), Ms(r.p90).c_str(),
                Ms(r.ttft50).c_str());
  }
  for (const Row& r : rows) {
    if (r.outcome.failed > 0) {
      std::printf("length %lld: %lld of %lld trials failed; first error: %s\n",
                  static_cast<long long>(r.outcome.context_length), static_cast<long long>(r.outcome.failed),
                  static_cast<long long>(r.outcome.trials), r.first_error.c_str());
    }
  }
}

nlohmann::ordered_json LengthJson(const Row& r) {
  const pdserve::LengthOutcome& o = r.outcome;
  const pdserve::Interval ci = pdserve::WilsonInterval(o.correct, o.trials);
  // NaN (no successful trial) is written as null.
  return {{"context_length", o.context_length},
          {"trials", o.trials},
          {"failed", o.failed},
          {"correct", o.correct},
          {"accuracy", static_cast<double>(o.correct) / static_cast<double>(o.trials)},
          {"ci95_low", ci.low},
          {"ci95_high", ci.high},
          {"answers_with_5_digits", o.answers_with_number},
          {"latency_ms_p50", r.p50},
          {"latency_ms_p90", r.p90},
          {"ttft_ms_p50", r.ttft50},
          {"first_error", NullIfEmpty(r.first_error)}};
}

nlohmann::ordered_json TrialJson(const Trial& t, const pdserve::PasskeyPosition& position) {
  using nlohmann::ordered_json;
  auto opt_num = [](int64_t v) { return v >= 0 ? ordered_json(v) : ordered_json(nullptr); };
  return {{"context_length", t.context_length},
          {"trial", t.index},
          {"prompt_tokens", opt_num(t.prompt_tokens)},
          {"usage_prompt_tokens", opt_num(t.usage_prompt_tokens)},
          {"position", position.name},
          {"depth", position.depth},
          {"filler_words", t.prompt.filler_words},
          {"filler_words_before", t.prompt.filler_words_before},
          {"passkey", t.passkey},
          {"answer_text", t.answer},
          {"answer_token_ids", t.answer_ids},
          {"extracted", t.extracted ? ordered_json(*t.extracted) : ordered_json(nullptr)},
          {"correct", t.correct},
          {"ttft_ms", t.ttft_ms ? ordered_json(*t.ttft_ms) : ordered_json(nullptr)},
          {"latency_ms", t.latency_ms},
          {"tokens", t.tokens},
          {"finish_reason", NullIfEmpty(t.finish_reason)},
          {"error", t.failed ? ordered_json(t.error) : ordered_json(nullptr)},
          {"prompt", t.prompt.text}};
}

// Everything the run produced, for --json-out.
struct Report {
  std::vector<Trial> trials;
  double elapsed_s = 0;
  std::vector<Row> rows;
  const Row* largest = nullptr;  // the headline's length
  pdserve::Verdict verdict;
};

void WriteJson(const Config& c, const Report& rep) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["router"] = c.opt.router;
  j["position"] = c.position.name;
  j["depth"] = c.position.depth;
  j["seed"] = c.seed;
  j["n_trials"] = c.n_trials;
  j["target"] = c.target;
  j["max_new_tokens"] = c.opt.max_new_tokens;
  j["elapsed_s"] = rep.elapsed_s;
  j["lengths"] = ordered_json::array();
  for (const Row& r : rep.rows) j["lengths"].push_back(LengthJson(r));
  j["headline"] = {{"context_length", rep.largest->outcome.context_length},
                   {"pass", rep.verdict.pass},
                   {"line", rep.verdict.line}};
  j["trials"] = ordered_json::array();
  for (const Trial& t : rep.trials) j["trials"].push_back(TrialJson(t, c.position));
  std::ofstream out(c.json_out);
  // The router sends whole UTF-8 characters; replace rather than throw if not.
  out << j.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) Die(absl::StrCat("cannot write --json-out ", c.json_out), 1);
  std::fprintf(stderr, "pdserve-passkey: wrote %zu trials to %s\n", rep.trials.size(), c.json_out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::InitCli(
      argc, argv,
      "Passkey retrieval (Mohtashami & Jaggi, 2023) against a pdserve router.\n"
      "Usage: pdserve-passkey [--router HOST:PORT] [--context-lengths 1024,2048,4096] [--n-trials 5]\n"
      "       [--position start|middle|end|DEPTH] [--seed 0] [--target 0.85] [--concurrency 4]\n"
      "       [--json-out FILE] [--require-target] [--max-new-tokens 16] [--deadline-s S]\n"
      "Prompts are sized with the router's Tokenize RPC to each length (never over, under by less than\n"
      "one filler word); each trial asks for its 5-digit passkey, greedy, and the answer is the first\n"
      "\\b\\d{5}\\b of the generated text. Prints a table per length and a PASS/WARNING headline for the\n"
      "largest; progress goes to stderr. Table: prompt = median prompt tokens, failed = RPC errors (counted\n"
      "as wrong), 5-digit = answers holding any 5-digit number, latencies client-side end to end.\n"
      "Exit: 0 (target met or not), 1 when the router cannot be reached or every trial failed,\n"
      "2 on bad flags, 3 when --require-target is given and the largest length misses --target.");

  const Config c = ParseConfig();
  auto security = pdserve::ClientSecurityFromFlags();  // --tls-ca, --api-key
  if (!security.ok()) pdserve::Die(security.status(), 2);
  auto channel = pdserve::MakeChannel(c.opt.router, *security);
  auto stub = pdserve::v1::Generator::NewStub(channel);
  Report rep;
  rep.trials = BuildTrials(stub.get(), c);
  rep.elapsed_s = RunTrials(stub.get(), c.opt, c.concurrency, &rep.trials);

  int64_t failed_total = 0;
  for (int64_t length : c.lengths) {
    rep.rows.push_back(SummarizeLength(length, rep.trials));
    failed_total += rep.rows.back().outcome.failed;
  }
  PrintTable(c, rep.rows);
  // The headline is the largest length: the claim a long-context model makes.
  rep.largest = &*std::max_element(rep.rows.begin(), rep.rows.end(), [](const Row& a, const Row& b) {
    return a.outcome.context_length < b.outcome.context_length;
  });
  rep.verdict = pdserve::JudgePasskey(rep.largest->outcome, c.target, c.position.name);
  std::printf("%s\n", rep.verdict.line.c_str());
  std::fflush(stdout);
  if (!c.json_out.empty()) WriteJson(c, rep);

  if (failed_total == static_cast<int64_t>(rep.trials.size())) {
    Die(absl::StrCat("every trial failed (", failed_total, " RPC errors; see the table)"), 1);
  }
  if (absl::GetFlag(FLAGS_require_target) && !rep.verdict.pass) {
    Die(absl::StrCat("--require-target: the largest length (", rep.largest->outcome.context_length,
                     " tokens) missed the target"),
        3);
  }
  return 0;
}
