// pdserve-passkey: passkey retrieval (Mohtashami & Jaggi, 2023) as a batch
// client of the public API (pdserve.v1.Generator). For each context length
// it sizes the prompt with the router's Tokenize RPC, runs n trials (greedy)
// on a small pool of threads, and prints a table, a headline for the largest
// length (and under --protocol seed the accuracy per position and a VERDICT
// line), and optionally every trial as JSON. Uses only the public proto. The
// run's plan, records and statistics: common/passkey/passkey_protocol.h and
// passkey_trials.h.
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
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cli/cli_util.h"
#include "common/cli/finish_reason.h"
#include "common/cli/progress.h"
#include "common/net/grpc_security.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "common/passkey/passkey.h"
#include "common/passkey/passkey_protocol.h"
#include "common/passkey/passkey_trials.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051", "The router's address, host:port.");
ABSL_FLAG(std::string, protocol, "custom",
          "custom (the flags as given) or seed (the seed's reference protocol: lengths 4096,8192,32768,65536,131072, "
          "100 trials per length spread start/middle/end by trial index % 3, a VERDICT line for 131072).");
// Empty / 0 defaults stand for the protocol's: an explicit value overrides it.
ABSL_FLAG(std::string, context_lengths, "",
          "Prompt lengths in tokens (the model's tokenizer, counted by the router), comma-separated; default "
          "1024,2048,4096, or 4096,8192,32768,65536,131072 under --protocol seed. Each plus --max-new-tokens "
          "must fit the model's max_context.");
ABSL_FLAG(int64_t, n_trials, 0,
          "Trials (distinct passkeys) per context length; default (0) 5, or 100 under --protocol seed.");
ABSL_FLAG(std::string, position, "",
          "Where the passkey goes: start, middle (the default), end, or a depth fraction in [0, 1] (0 = start). "
          "Not with --protocol seed, which spreads the trials itself.");
ABSL_FLAG(uint64_t, seed, 0, "Base seed: the passkeys of length L come from seed + L.");
ABSL_FLAG(double, target, 0.85, "Accuracy the largest length (and the VERDICT's length) should reach, in [0, 1].");
ABSL_FLAG(int64_t, concurrency, 4, "Trials in flight at once (one thread and one stream each).");
ABSL_FLAG(std::string, json_out, "", "Write every trial and the per-length summary to this JSON file.");
ABSL_FLAG(std::string, trials_jsonl, "",
          "Append each finished trial to this file, one flushed JSON line (the --json-out trial object), after a "
          "header line naming the run. Refused when the file is not empty, unless --resume.");
ABSL_FLAG(bool, resume, false,
          "With --trials-jsonl: read the file first and run only the trials it lacks (or that ended in an RPC "
          "error); the table and verdict count its trials too. Refused when the file was made with another "
          "--protocol, --seed, --context-lengths, --max-new-tokens or --position.");
ABSL_FLAG(int64_t, first_trial, 0,
          "Run and count only the trials with index >= N of each length (a run split across machines or "
          "sessions: N = the trials the other part did). The trials are planned as without it, so trial i has "
          "the same passkey, position and prompt in every part.");
ABSL_FLAG(bool, require_target, false, "Exit 3 when the largest length misses --target (default: exit 0 either way).");
ABSL_FLAG(int64_t, max_new_tokens, 16, "Tokens generated per trial (greedy).");
ABSL_FLAG(double, deadline_s, 0, "Deadline of each RPC in seconds; 0 = none.");

namespace {

using pdserve::Die;
using pdserve::PasskeyTrial;
using Clock = std::chrono::steady_clock;

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

// The router's Tokenize: the token count of `text` and the model's
// max_context (0 from a router that does not report it).
struct Tokenized {
  int64_t tokens = 0;
  int64_t max_context = 0;
};
absl::StatusOr<Tokenized> Tokenize(pdserve::v1::Generator::Stub* stub, double deadline_s, const std::string& text) {
  pdserve::v1::TokenizeRequest req;
  req.set_text(text);
  pdserve::v1::TokenizeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline_s);
  const grpc::Status status = stub->Tokenize(&ctx, req, &resp);
  if (!status.ok()) {
    return absl::Status(pdserve::FromGrpcStatus(status).code(), absl::StrCat("Tokenize: ", RpcError(status)));
  }
  return Tokenized{resp.token_ids_size(), static_cast<int64_t>(resp.max_context())};
}

// The router's Tokenize as the library's token counter.
absl::StatusOr<int64_t> CountTokens(pdserve::v1::Generator::Stub* stub, double deadline_s, const std::string& text) {
  absl::StatusOr<Tokenized> t = Tokenize(stub, deadline_s, text);
  if (!t.ok()) return t.status();
  return t->tokens;
}

void RunTrial(pdserve::v1::Generator::Stub* stub, const Options& opt, PasskeyTrial* t) {
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
  t->done = true;
  if (!status.ok()) {
    t->failed = true;
    t->error = RpcError(status);
    return;
  }
  // Only the new text: the prompt holds the passkey too.
  t->extracted = pdserve::ExtractPasskeyAnswer(t->answer);
  t->correct = t->extracted.has_value() && *t->extracted == t->passkey;
}

nlohmann::ordered_json NullIfEmpty(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

std::string Ms(double v) { return v == v ? absl::StrFormat("%.1f", v) : "-"; }  // NaN: no successful trial

// ---- The run's configuration: the flags, checked (bad values exit 2).
struct Config {
  Options opt;
  pdserve::PasskeyRunSpec spec;  // protocol, seed, lengths, max_new_tokens, position
  int64_t n_trials = 0;
  int64_t first_trial = 0;  // trials with a lower index are planned, not run
  double target = 0;
  int64_t concurrency = 0;
  std::string json_out;
  std::string trials_jsonl;
  bool resume = false;
};

// --protocol and what it sets: lengths, trials per length and positions,
// each unless given explicitly (--position is refused under seed).
void ParseProtocol(Config& c) {
  absl::StatusOr<pdserve::PasskeyProtocol> protocol = pdserve::ParsePasskeyProtocol(absl::GetFlag(FLAGS_protocol));
  if (!protocol.ok()) Die("--protocol: " + std::string(protocol.status().message()), 2);
  c.spec.protocol = *protocol;
  const bool seed = c.spec.protocol == pdserve::PasskeyProtocol::kSeed;
  const std::string position_flag = absl::GetFlag(FLAGS_position);
  if (seed && !position_flag.empty()) {
    Die(absl::StrCat("--position ", position_flag, " cannot go with --protocol seed, which puts trial "
                     "i of each length at start, middle or end by i % 3"),
        2);
  }
  std::string lengths_flag = absl::GetFlag(FLAGS_context_lengths);
  if (lengths_flag.empty()) lengths_flag = seed ? absl::StrJoin(pdserve::kSeedContextLengths, ",") : "1024,2048,4096";
  absl::StatusOr<std::vector<int64_t>> lengths = pdserve::ParsePasskeyLengths(lengths_flag);
  if (!lengths.ok()) Die("--context-lengths: " + std::string(lengths.status().message()), 2);
  c.spec.lengths = *std::move(lengths);
  absl::StatusOr<pdserve::PasskeyPosition> position =
      pdserve::ParsePasskeyPosition(position_flag.empty() ? "middle" : position_flag);
  if (!position.ok()) Die("--position: " + std::string(position.status().message()), 2);
  c.spec.position = *std::move(position);
  c.n_trials = absl::GetFlag(FLAGS_n_trials);
  if (c.n_trials == 0) c.n_trials = seed ? pdserve::kSeedTrialsPerLength : 5;
  if (c.n_trials < 1 || c.n_trials > pdserve::kPasskeySpace) Die("--n-trials must be in [1, 100000]", 2);
  c.first_trial = absl::GetFlag(FLAGS_first_trial);
  if (c.first_trial < 0 || c.first_trial >= c.n_trials) {
    Die(absl::StrCat("--first-trial ", c.first_trial, " must be in [0, --n-trials ", c.n_trials, ")"), 2);
  }
}

Config ParseConfig() {
  Config c;
  Options& opt = c.opt;
  opt.router = absl::GetFlag(FLAGS_router);
  opt.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  opt.deadline_s = absl::GetFlag(FLAGS_deadline_s);
  ParseProtocol(c);
  c.target = absl::GetFlag(FLAGS_target);
  if (!(c.target >= 0 && c.target <= 1)) Die("--target must be in [0, 1]", 2);
  c.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (c.concurrency < 1 || c.concurrency > 1024) Die("--concurrency must be in [1, 1024]", 2);
  if (opt.max_new_tokens < 1 || opt.max_new_tokens > std::numeric_limits<uint32_t>::max()) {
    Die("--max-new-tokens must be in [1, 2^32)", 2);
  }
  if (!(opt.deadline_s >= 0)) Die("--deadline-s must be >= 0 (0 = none)", 2);
  c.spec.seed = absl::GetFlag(FLAGS_seed);
  c.spec.max_new_tokens = opt.max_new_tokens;
  c.json_out = absl::GetFlag(FLAGS_json_out);
  c.trials_jsonl = absl::GetFlag(FLAGS_trials_jsonl);
  c.resume = absl::GetFlag(FLAGS_resume);
  if (c.resume && c.trials_jsonl.empty()) Die("--resume needs --trials-jsonl FILE (the trials to resume)", 2);
  return c;
}

// ---- Before any Generate.

// Refuses (exit 2) a length the model cannot serve, from the max_context
// the router's Tokenize reports; exit 1 when the router cannot be reached.
void CheckLengthsFit(pdserve::v1::Generator::Stub* stub, const Config& c) {
  absl::StatusOr<Tokenized> probe = Tokenize(stub, c.opt.deadline_s, "What is the passkey?");
  if (!probe.ok()) {
    Die(absl::StrCat("cannot reach the router at ", c.opt.router, ": ", probe.status().message()), 1);
  }
  if (probe->max_context <= 0) {
    std::fprintf(stderr, "pdserve-passkey: the router does not report max_context (an older router): lengths not "
                         "checked before generating\n");
    return;
  }
  const absl::Status fit = pdserve::CheckLengthsFitContext(c.spec.lengths, c.opt.max_new_tokens, probe->max_context);
  if (!fit.ok()) Die(absl::StrCat("--context-lengths: ", fit.message(), "; no trial was sent"), 2);
}

// --trials-jsonl: the records to resume (exit 2 when the file is another
// run's), or a check that a fresh run would not overwrite one.
pdserve::PasskeyTrialsFile ReadTrialsFile(const Config& c) {
  if (c.trials_jsonl.empty()) return {};
  if (!c.resume) {
    const absl::Status fresh = pdserve::CheckNewPasskeyTrialsFile(c.trials_jsonl);
    if (!fresh.ok()) Die(absl::StrCat("--trials-jsonl: ", fresh.message()), 2);
    return {};
  }
  absl::StatusOr<pdserve::PasskeyTrialsFile> file = pdserve::ReadPasskeyTrialsFile(c.trials_jsonl, c.spec);
  if (!file.ok()) Die(absl::StrCat("--resume: ", file.status().message()), 2);
  return *std::move(file);
}

// ---- The trials.

// Sizes one filler per length (the largest that fits at every position the
// run uses; only the passkey's digits and its place change, which a BPE may
// count a token more or less: each trial's own count is recorded), then
// builds every prompt.
std::vector<PasskeyTrial> BuildTrials(pdserve::v1::Generator::Stub* stub, const Config& c) {
  std::vector<PasskeyTrial> trials;
  const pdserve::TokenCounter counter = [&](const std::string& text) {
    return CountTokens(stub, c.opt.deadline_s, text);
  };
  for (int64_t length : c.spec.lengths) {
    absl::StatusOr<std::vector<int>> first = pdserve::DrawPasskeys(1, c.spec.seed, length);
    if (!first.ok()) Die(first.status(), 2);
    int calls = 0;
    absl::StatusOr<pdserve::PasskeyPrompt> sized = pdserve::SizeLengthFiller(
        length, pdserve::PasskeyRunPositions(c.spec), pdserve::FormatPasskey(first->front()), counter, &calls);
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
    absl::StatusOr<std::vector<PasskeyTrial>> planned =
        pdserve::PlanLengthTrials(c.spec, length, c.n_trials, sized->filler_words);
    if (!planned.ok()) Die(planned.status(), 2);
    for (PasskeyTrial& t : *planned) trials.push_back(std::move(t));
  }
  return trials;
}

// Takes the resumed records' outcomes into `trials` (exit 2 when they do
// not match this run's trials) and says what is left.
void ApplyResume(const Config& c, const pdserve::PasskeyTrialsFile& file, std::vector<PasskeyTrial>* trials) {
  absl::StatusOr<pdserve::PasskeyResumeCount> n = pdserve::ApplyResumedTrials(file.records, trials);
  if (!n.ok()) Die(absl::StrCat("--resume: ", c.trials_jsonl, ": ", n.status().message()), 2);
  std::fprintf(stderr,
               "pdserve-passkey: resumed %lld of %zu trials from %s (%lld that failed run again, %lld records of "
               "trials outside this run ignored); %zu to run\n",
               static_cast<long long>(n->resumed), trials->size(), c.trials_jsonl.c_str(),
               static_cast<long long>(n->failed_again), static_cast<long long>(n->outside),
               trials->size() - static_cast<size_t>(n->resumed));
}

// Runs every trial not yet done on a fixed pool of `concurrency` workers
// that pull them in order, each one sync stream, appending each finished
// one to `writer` (when set), with progress on stderr. Returns the elapsed
// seconds; exit 1 when the trials file cannot be written.
double RunTrials(pdserve::v1::Generator::Stub* stub, const Config& c, pdserve::PasskeyTrialsWriter* writer,
                 std::vector<PasskeyTrial>* trials) {
  std::vector<PasskeyTrial*> todo;
  double weight_total = 0;
  for (PasskeyTrial& t : *trials) {
    if (t.done) continue;
    todo.push_back(&t);
    weight_total += static_cast<double>(t.context_length);
  }
  const size_t n = todo.size(), resumed = trials->size() - todo.size();
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  double weight_done = 0;
  absl::Status write_error;
  std::vector<std::thread> workers;
  const Clock::time_point run_start = Clock::now();
  for (size_t w = 0; w < std::min<size_t>(static_cast<size_t>(c.concurrency), n); ++w) {
    workers.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        bool stop;
        {
          std::lock_guard<std::mutex> lock(mu);
          stop = !write_error.ok();
        }
        // After a write error the rest are skipped (counted, so the wait ends).
        if (!stop) RunTrial(stub, c.opt, todo[i]);
        const absl::Status written = writer != nullptr && !stop ? writer->Append(*todo[i]) : absl::OkStatus();
        std::lock_guard<std::mutex> lock(mu);
        if (!written.ok() && write_error.ok()) write_error = written;
        ++done;
        if (!stop) weight_done += static_cast<double>(todo[i]->context_length);
        cv.notify_all();
      }
    });
  }
  const double elapsed_s = pdserve::WaitWithProgress(mu, cv, done, n, run_start, [&](size_t d, double elapsed) {
    return pdserve::PasskeyProgressLine(d, n, resumed, weight_done, weight_total, elapsed);
  });
  for (std::thread& w : workers) w.join();
  if (!write_error.ok()) Die(absl::StrCat("--trials-jsonl: ", write_error.message()), 1);
  return elapsed_s;
}

// ---- The report.

// The table of every length, then the first error of each length that had
// failures.
void PrintTable(const Config& c, const std::vector<pdserve::PasskeyLengthSummary>& rows) {
  std::printf("passkey retrieval (protocol %s), position %s, %lld trials per length, greedy, max_new_tokens %lld, "
              "seed %llu\n",
              pdserve::PasskeyProtocolName(c.spec.protocol), pdserve::PasskeyPositionsName(c.spec).c_str(),
              static_cast<long long>(c.n_trials), static_cast<long long>(c.opt.max_new_tokens),
              static_cast<unsigned long long>(c.spec.seed));
  std::printf("%8s %8s %6s %6s %7s %8s %15s %7s %10s %10s %10s\n", "length", "prompt", "trials", "failed", "correct",
              "accuracy", "95% CI (Wilson)", "5-digit", "p50 ms", "p90 ms", "TTFT p50");
  for (const pdserve::PasskeyLengthSummary& r : rows) {
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
  for (const pdserve::PasskeyLengthSummary& r : rows) {
    if (r.outcome.failed > 0) {
      std::printf("length %lld: %lld of %lld trials failed; first error: %s\n",
                  static_cast<long long>(r.outcome.context_length), static_cast<long long>(r.outcome.failed),
                  static_cast<long long>(r.outcome.trials), r.first_error.c_str());
    }
  }
}

// Accuracy per position and over all of them, per length (correct/trials =
// accuracy (Wilson 95%)).
void PrintPositionTable(const std::vector<pdserve::PasskeyLengthCells>& cells) {
  if (cells.empty()) return;
  std::printf("accuracy by position: correct/trials = accuracy (Wilson 95%% interval)\n%8s", "length");
  for (const pdserve::PasskeyCell& p : cells.front().positions) std::printf(" %28s", p.position.c_str());
  std::printf(" %28s\n", "all positions");
  for (const pdserve::PasskeyLengthCells& row : cells) {
    std::printf("%8lld", static_cast<long long>(row.context_length));
    for (const pdserve::PasskeyCell& p : row.positions) std::printf(" %28s", pdserve::FormatPasskeyCell(p).c_str());
    std::printf(" %28s\n", pdserve::FormatPasskeyCell(row.all).c_str());
  }
}

nlohmann::ordered_json CellJson(const pdserve::PasskeyCell& cell) {
  const pdserve::Interval ci = pdserve::WilsonInterval(cell.correct, cell.trials);
  return {{"position", cell.position}, {"trials", cell.trials},  {"correct", cell.correct},
          {"failed", cell.failed},     {"ci95_low", ci.low},     {"ci95_high", ci.high}};
}

nlohmann::ordered_json LengthJson(const pdserve::PasskeyLengthSummary& r, const pdserve::PasskeyLengthCells& cells) {
  const pdserve::LengthOutcome& o = r.outcome;
  const pdserve::Interval ci = pdserve::WilsonInterval(o.correct, o.trials);
  nlohmann::ordered_json by_position = nlohmann::ordered_json::array();
  for (const pdserve::PasskeyCell& cell : cells.positions) by_position.push_back(CellJson(cell));
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
          {"first_error", NullIfEmpty(r.first_error)},
          {"by_position", by_position}};
}

// Everything the run produced, for --json-out.
struct Report {
  std::vector<PasskeyTrial> trials;
  double elapsed_s = 0;
  std::vector<pdserve::PasskeyLengthSummary> rows;
  std::vector<pdserve::PasskeyLengthCells> cells;  // per length, by position
  const pdserve::PasskeyLengthSummary* largest = nullptr;  // the headline's length
  pdserve::Verdict verdict;
  std::optional<pdserve::SeedVerdict> seed_verdict;  // --protocol seed
};

void WriteJson(const Config& c, const Report& rep) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["router"] = c.opt.router;
  j["protocol"] = pdserve::PasskeyProtocolName(c.spec.protocol);
  j["position"] = pdserve::PasskeyPositionsName(c.spec);
  const bool seed = c.spec.protocol == pdserve::PasskeyProtocol::kSeed;
  j["depth"] = seed ? ordered_json(nullptr) : ordered_json(c.spec.position.depth);
  j["seed"] = c.spec.seed;
  j["n_trials"] = c.n_trials;
  j["first_trial"] = c.first_trial;
  j["target"] = c.target;
  j["max_new_tokens"] = c.opt.max_new_tokens;
  j["elapsed_s"] = rep.elapsed_s;
  j["resumed_trials"] = std::count_if(rep.trials.begin(), rep.trials.end(), [](const PasskeyTrial& t) {
    return t.resumed;
  });
  j["lengths"] = ordered_json::array();
  for (size_t i = 0; i < rep.rows.size(); ++i) j["lengths"].push_back(LengthJson(rep.rows[i], rep.cells[i]));
  j["headline"] = {{"context_length", rep.largest->outcome.context_length},
                   {"pass", rep.verdict.pass},
                   {"line", rep.verdict.line}};
  j["verdict"] = !rep.seed_verdict ? ordered_json(nullptr)
                                   : ordered_json{{"context_length", pdserve::kSeedVerdictLength},
                                                  {"result", pdserve::SeedVerdictName(rep.seed_verdict->result)},
                                                  {"line", rep.seed_verdict->line}};
  j["trials"] = ordered_json::array();
  for (const PasskeyTrial& t : rep.trials) j["trials"].push_back(pdserve::PasskeyTrialJson(t));
  std::ofstream out(c.json_out);
  // The router sends whole UTF-8 characters; replace rather than throw if not.
  out << j.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) Die(absl::StrCat("cannot write --json-out ", c.json_out), 1);
  std::fprintf(stderr, "pdserve-passkey: wrote %zu trials to %s\n", rep.trials.size(), c.json_out.c_str());
}

// The tables, the headline (the largest length: the claim a long-context
// model makes) and, under --protocol seed, the VERDICT line; then --json-out.
void PrintReport(const Config& c, Report& rep) {
  for (int64_t length : c.spec.lengths) rep.rows.push_back(pdserve::SummarizePasskeyLength(length, rep.trials));
  rep.cells = pdserve::CountByPosition(rep.trials, c.spec.lengths, pdserve::PasskeyRunPositions(c.spec));
  PrintTable(c, rep.rows);
  const bool seed = c.spec.protocol == pdserve::PasskeyProtocol::kSeed;
  if (seed) PrintPositionTable(rep.cells);
  rep.largest = &*std::max_element(rep.rows.begin(), rep.rows.end(), [](const auto& a, const auto& b) {
    return a.outcome.context_length < b.outcome.context_length;
  });
  rep.verdict = pdserve::JudgePasskey(rep.largest->outcome, c.target, pdserve::PasskeyPositionsName(c.spec));
  std::printf("%s\n", rep.verdict.line.c_str());
  if (seed) {
    rep.seed_verdict = pdserve::JudgeSeedProtocol(rep.cells, c.target);
    std::printf("%s\n", rep.seed_verdict->line.c_str());
  }
  std::fflush(stdout);
  if (!c.json_out.empty()) WriteJson(c, rep);
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::InitCli(
      argc, argv,
      "Passkey retrieval (Mohtashami & Jaggi, 2023) against a pdserve router.\n"
      "Usage: pdserve-passkey [--router HOST:PORT] [--protocol custom|seed] [--context-lengths 1024,2048,4096]\n"
      "       [--n-trials 5] [--position start|middle|end|DEPTH] [--seed 0] [--target 0.85] [--concurrency 4]\n"
      "       [--json-out FILE] [--trials-jsonl FILE [--resume]] [--first-trial N] [--require-target] [--max-new-tokens 16]\n"
      "       [--deadline-s S]\n"
      "Prompts are sized with the router's Tokenize RPC to each length (never over, under by less than\n"
      "one filler word; one filler per length, so a length's trials differ only in the passkey and where\n"
      "it goes); each trial asks for its 5-digit passkey, greedy, and the answer is the first \\b\\d{5}\\b\n"
      "of the generated text. A length whose prompt plus --max-new-tokens exceeds the model's max_context\n"
      "(which Tokenize reports) is refused before any Generate. Prints a table per length and a\n"
      "PASS/WARNING headline for the largest; progress (done/total, ETA) goes to stderr. Table: prompt =\n"
      "median prompt tokens, failed = RPC errors (counted as wrong), 5-digit = answers holding any 5-digit\n"
      "number, latencies client-side end to end.\n"
      "--protocol seed: lengths 4096,8192,32768,65536,131072 and 100 trials per length unless\n"
      "--context-lengths / --n-trials say otherwise; trial i of each length goes to start, middle or end\n"
      "by i % 3 (100 trials: 34 start, 33 middle, 33 end; --position is refused). Adds the accuracy per\n"
      "position and over all positions with Wilson 95% intervals, and a last line\n"
      "  VERDICT: 131072 tokens: K/N = A% (Wilson L-H%): >= T%: PASS   (or < T%: FAIL, or NOT RUN)\n"
      "--trials-jsonl FILE appends each finished trial; --resume continues a killed run from it.\n"
      "Exit: 0 (target met or not), 1 when the router cannot be reached or every trial failed,\n"
      "2 on bad flags or lengths, 3 when --require-target is given and the largest length misses --target.");

  const Config c = ParseConfig();
  const pdserve::PasskeyTrialsFile resumed = ReadTrialsFile(c);  // exit 2 when it is another run's
  auto security = pdserve::ClientSecurityFromFlags();  // --tls-ca, --api-key
  if (!security.ok()) pdserve::Die(security.status(), 2);
  auto channel = pdserve::MakeChannel(c.opt.router, *security);
  auto stub = pdserve::v1::Generator::NewStub(channel);
  CheckLengthsFit(stub.get(), c);
  Report rep;
  rep.trials = BuildTrials(stub.get(), c);
  // --first-trial: the earlier trials were planned (so the rest keep their passkeys and prompts), not run.
  rep.trials.erase(std::remove_if(rep.trials.begin(), rep.trials.end(),
                                  [&](const PasskeyTrial& t) { return t.index < c.first_trial; }),
                   rep.trials.end());
  std::unique_ptr<pdserve::PasskeyTrialsWriter> writer;
  if (!c.trials_jsonl.empty()) {
    if (c.resume) ApplyResume(c, resumed, &rep.trials);
    auto opened = pdserve::PasskeyTrialsWriter::Open(c.trials_jsonl, c.spec, resumed.complete_bytes);
    if (!opened.ok()) Die(absl::StrCat("--trials-jsonl: ", opened.status().message()), 1);
    writer = *std::move(opened);
  }
  rep.elapsed_s = RunTrials(stub.get(), c, writer.get(), &rep.trials);
  PrintReport(c, rep);

  int64_t failed_total = 0;
  for (const pdserve::PasskeyLengthSummary& r : rep.rows) failed_total += r.outcome.failed;
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
