// pdserve-ttft-bench: time to first token at several prompt lengths, in one
// process (Engine: NewSequence + Prefill + Sample, what pdserve-generate does
// before its first token) and through a running router (Generate with
// max_new_tokens = 1), with the router's breakdown from Usage: prefill time,
// KV hand-off bytes and time, the hand-off's share of TTFT and the part of
// TTFT that is not prefill. Checks that both give the same greedy first token.
// All single-process trials run before any gRPC trial: on a small machine the
// in-process engine and the stack must not compete for the cores.
// The in-process engine's flags (--model, --weights-dtype, --kv-dtype,
// --threads, --prefill-chunk) are common/engine/engine_flags: start the stack
// with the same values.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_clock.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/engine_flags.h"
#include "common/kernels/bf16_matmul.h"
#include "common/net/grpc_security.h"
#include "common/net/server.h"
#include "common/util/omp_env.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, router, "",
          "Address (host:port) of a running router; without it only single-process numbers are measured.");
ABSL_FLAG(std::string, prompt_lens, "128,512,1024,2048", "Prompt lengths in tokens, comma-separated.");
ABSL_FLAG(int, trials, 3, "Timed trials per prompt length and mode; the median is reported.");
ABSL_FLAG(int64_t, deadline_s, 600, "Deadline of each Generate call, seconds.");
ABSL_FLAG(std::string, csv_out, "", "Also write the table (medians, one row per prompt length) to this CSV file.");

namespace {

using pdserve::bench::Clock;
using pdserve::bench::MsSince;
double NsToMs(double ns) { return ns / 1e6; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The benchmark's prompt: (i*7919 + 13) % vocab for i in [0, len).
std::vector<int64_t> MakePrompt(int64_t len, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + 13) % vocab;
  return ids;
}

// One in-process TTFT: a fresh sequence, prefill, greedy sample.
int64_t SingleTtft(const pdserve::Engine& engine, const std::vector<int64_t>& ids, double* ms) {
  const auto t0 = Clock::now();
  auto seq = engine.NewSequence();
  auto logits = engine.Prefill(seq.get(), ids);
  if (!logits.ok()) pdserve::Die(logits.status());
  const int64_t tok = engine.Sample(*logits, {}, 0);
  *ms = MsSince(t0);
  return tok;
}

struct DisaggTrial {
  int64_t first_token = -1;
  double client_ttft_ms = 0;
  pdserve::v1::Usage usage;
};

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    default: return "error";
  }
}

// One Generate call with max_new_tokens = 1 (greedy): the client-side TTFT
// (call start to the first message carrying tokens) and the last message's
// Usage.
DisaggTrial DisaggTtft(pdserve::v1::Generator::Stub* stub, const std::vector<int64_t>& ids, int64_t deadline_s) {
  pdserve::v1::GenerateRequest req;
  for (int64_t id : ids) req.add_token_ids(static_cast<uint32_t>(id));
  pdserve::v1::SamplingParams* s = req.mutable_sampling();
  s->set_max_new_tokens(1);
  s->set_temperature(0.0f);
  s->set_ignore_eos(true);

  DisaggTrial out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  pdserve::v1::GenerateResponse resp, last;
  bool got_any = false;
  const auto t0 = Clock::now();
  auto reader = stub->Generate(&ctx, req);
  while (reader->Read(&resp)) {
    if (out.first_token < 0 && resp.token_ids_size() > 0) {
      out.client_ttft_ms = MsSince(t0);
      out.first_token = resp.token_ids(0);
    }
    last = resp;
    got_any = true;
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    pdserve::Die(absl::StrCat("Generate (prompt of ", ids.size(), " tokens): ", CodeName(status.error_code()), ": ",
                              status.error_message()));
  }
  if (!got_any || out.first_token < 0) pdserve::Die("Generate returned no token");
  if (!last.has_usage()) pdserve::Die("the last Generate message carries no usage");
  out.usage = last.usage();
  if (out.usage.prompt_tokens() != ids.size()) {
    std::fprintf(stderr, "warning: router reports %u prompt tokens, sent %zu\n", out.usage.prompt_tokens(),
                 ids.size());
  }
  return out;
}

struct Result {
  int64_t len = 0;
  double single_ms = 0;
  int64_t single_token = -1;
  bool single_consistent = true;
  // Disaggregated (filled only with --router).
  bool have_disagg = false;
  double ttft_ms = 0, client_ms = 0, prefill_ms = 0, handoff_ms = 0, handoff_exposed_ms = 0, exposed_ms = 0;
  double handoff_bytes = 0;
  std::vector<int64_t> disagg_tokens;  // first token of every trial
  bool match = false;
};

std::string Fixed(double v, int prec) { return absl::StrFormat("%.*f", prec, v); }

// ---- Options: the flags, checked (bad values exit 2).

struct Options {
  std::string model_dir, router, csv;
  int trials = 0;
  int64_t deadline_s = 0;
  std::string kd, wd;  // --kv-dtype and --weights-dtype as given
  std::vector<int64_t> lens;
  pdserve::EngineOptions eo;  // the in-process engine's (common/engine/engine_flags)
};

Options ParseOptions() {
  Options o;
  auto flags = pdserve::EngineFlagsFromCommandLine();
  if (!flags.ok()) pdserve::Die(flags.status(), 2);
  o.model_dir = flags->model_dir;
  o.eo = flags->options;
  o.kd = absl::GetFlag(FLAGS_kv_dtype);
  o.wd = absl::GetFlag(FLAGS_weights_dtype);
  o.router = absl::GetFlag(FLAGS_router);
  o.trials = absl::GetFlag(FLAGS_trials);
  if (o.trials < 1) pdserve::Die("--trials must be >= 1", 2);
  o.deadline_s = absl::GetFlag(FLAGS_deadline_s);
  if (o.deadline_s < 1) pdserve::Die("--deadline-s must be >= 1", 2);
  auto lens = pdserve::ParseIdList(absl::GetFlag(FLAGS_prompt_lens));
  if (!lens.ok()) pdserve::Die("--prompt-lens: " + std::string(lens.status().message()), 2);
  if (lens->empty()) pdserve::Die("--prompt-lens needs at least one length", 2);
  for (int64_t n : *lens) {
    if (n < 1) pdserve::Die("--prompt-lens: every length must be >= 1", 2);
  }
  o.lens = *std::move(lens);
  o.csv = absl::GetFlag(FLAGS_csv_out);
  return o;
}

// Loads the in-process engine and checks every length fits its context (with
// room for the one generated token when a router is given).
std::unique_ptr<pdserve::Engine> LoadEngine(const Options& o) {
  std::fprintf(stderr, "loading %s ...\n", o.model_dir.c_str());
  auto loaded = pdserve::Engine::Load(o.model_dir, o.eo);
  if (!loaded.ok()) pdserve::Die(loaded.status());
  std::unique_ptr<pdserve::Engine> engine = std::move(*loaded);
  const pdserve::ModelConfig& c = engine->config();
  if (c.vocab_size > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    pdserve::Die("vocab_size does not fit uint32");
  }
  for (int64_t n : o.lens) {
    const int64_t need = n + (o.router.empty() ? 0 : 1);
    if (need > c.max_context) {
      pdserve::Die(absl::StrCat("--prompt-lens: ", n, " tokens", o.router.empty() ? "" : " + 1 generated",
                                " is above the model's max_context ", c.max_context),
                   2);
    }
  }
  return engine;
}

// ---- Phase 1: every single-process trial (after one untimed warmup).
void RunSinglePhase(const pdserve::Engine& engine, const Options& o, std::vector<Result>* results) {
  const int64_t vocab = engine.config().vocab_size;
  const int64_t shortest = *std::min_element(o.lens.begin(), o.lens.end());
  {
    double warm_ms = 0;
    SingleTtft(engine, MakePrompt(shortest, vocab), &warm_ms);
    std::fprintf(stderr, "single: warmup (%lld tokens) %.1f ms\n", static_cast<long long>(shortest), warm_ms);
  }
  for (Result& r : *results) {
    const std::vector<int64_t> ids = MakePrompt(r.len, vocab);
    std::vector<double> ms;
    for (int t = 0; t < o.trials; ++t) {
      double m = 0;
      const int64_t tok = SingleTtft(engine, ids, &m);
      ms.push_back(m);
      if (t == 0) {
        r.single_token = tok;
      } else if (tok != r.single_token) {
        r.single_consistent = false;
        std::fprintf(stderr, "warning: in-process first token differs between trials at len %lld: %lld vs %lld\n",
                     static_cast<long long>(r.len), static_cast<long long>(tok),
                     static_cast<long long>(r.single_token));
      }
      std::fprintf(stderr, "single len=%lld trial %d/%d: %.2f ms (token %lld)\n", static_cast<long long>(r.len), t + 1,
                   o.trials, m, static_cast<long long>(tok));
    }
    r.single_ms = Median(ms);
  }
}

// ---- Phase 2: every gRPC trial of one length; medians into `r`.
void DisaggLength(pdserve::v1::Generator::Stub* stub, const Options& o, int64_t vocab, Result* r) {
  const std::vector<int64_t> ids = MakePrompt(r->len, vocab);
  std::vector<double> ttft, client, prefill, hbytes, hms, hexp, exposed;
  for (int t = 0; t < o.trials; ++t) {
    const DisaggTrial d = DisaggTtft(stub, ids, o.deadline_s);
    const pdserve::v1::Usage& u = d.usage;
    ttft.push_back(NsToMs(u.ttft_ns()));
    client.push_back(d.client_ttft_ms);
    prefill.push_back(NsToMs(u.prefill_ns()));
    hbytes.push_back(static_cast<double>(u.kv_handoff_bytes()));
    hms.push_back(NsToMs(u.kv_handoff_ns()));
    hexp.push_back(NsToMs(u.kv_handoff_exposed_ns()));
    exposed.push_back(NsToMs(static_cast<double>(u.ttft_ns()) - static_cast<double>(u.prefill_ns())));
    r->disagg_tokens.push_back(d.first_token);
    std::fprintf(stderr,
                 "disagg len=%lld trial %d/%d: router TTFT %.2f ms, client %.2f ms, prefill %.2f ms, "
                 "hand-off %llu B in %.2f ms (%.2f ms exposed) (token %lld)\n",
                 static_cast<long long>(r->len), t + 1, o.trials, ttft.back(), client.back(), prefill.back(),
                 static_cast<unsigned long long>(u.kv_handoff_bytes()), hms.back(), hexp.back(),
                 static_cast<long long>(d.first_token));
  }
  r->have_disagg = true;
  r->ttft_ms = Median(ttft);
  r->client_ms = Median(client);
  r->prefill_ms = Median(prefill);
  r->handoff_bytes = Median(hbytes);
  r->handoff_ms = Median(hms);
  r->handoff_exposed_ms = Median(hexp);
  r->exposed_ms = Median(exposed);
  r->match = r->single_consistent;
  for (int64_t tok : r->disagg_tokens) r->match = r->match && tok == r->single_token;
}

// Phase 2 for every length, through --router (after one untimed warmup).
void RunDisaggPhase(const Options& o, int64_t vocab, std::vector<Result>* results) {
  auto security = pdserve::ClientSecurityFromFlags();  // --tls-ca, --api-key
  if (!security.ok()) pdserve::Die(security.status(), 2);
  auto channel = pdserve::MakeChannel(o.router, *security);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    pdserve::Die("cannot connect to the router at " + o.router + " within 10 s");
  }
  auto stub = pdserve::v1::Generator::NewStub(channel);
  const int64_t shortest = *std::min_element(o.lens.begin(), o.lens.end());
  {
    const DisaggTrial w = DisaggTtft(stub.get(), MakePrompt(shortest, vocab), o.deadline_s);
    std::fprintf(stderr, "disagg: warmup (%lld tokens) client %.1f ms, router %.1f ms\n",
                 static_cast<long long>(shortest), w.client_ttft_ms, NsToMs(w.usage.ttft_ns()));
  }
  for (Result& r : *results) DisaggLength(stub.get(), o, vocab, &r);
}

// ---- The report.

// Prints the table and any mismatches; returns whether one was found.
bool PrintTable(const std::vector<Result>& results) {
  std::printf("\n%10s %14s %14s %14s %11s %15s %12s %15s %16s %16s %12s  %s\n", "prompt_len", "single TTFT ms",
              "disagg TTFT ms", "client TTFT ms", "prefill ms", "hand-off bytes", "hand-off ms", "hand-off/TTFT %",
              "h-off exposed ms", "TTFT-prefill ms", "first token", "match");
  bool any_mismatch = false;
  for (const Result& r : results) {
    auto col = [&](double v, int prec) { return r.have_disagg ? Fixed(v, prec) : std::string("-"); };
    const std::string share = r.have_disagg && r.ttft_ms > 0 ? Fixed(100.0 * r.handoff_ms / r.ttft_ms, 1) : "-";
    const char* match = !r.have_disagg ? "-" : r.match ? "match" : "MISMATCH";
    any_mismatch = any_mismatch || (r.have_disagg && !r.match);
    std::printf("%10lld %14.2f %14s %14s %11s %15s %12s %15s %16s %16s %12lld  %s\n", static_cast<long long>(r.len),
                r.single_ms, col(r.ttft_ms, 2).c_str(), col(r.client_ms, 2).c_str(), col(r.prefill_ms, 2).c_str(),
                col(r.handoff_bytes, 0).c_str(), col(r.handoff_ms, 2).c_str(), share.c_str(),
                col(r.handoff_exposed_ms, 2).c_str(), col(r.exposed_ms, 2).c_str(), static_cast<long long>(r.single_token), match);
  }
  std::printf(
      "(first token: the in-process greedy token; hand-off/TTFT = median hand-off ms / median router TTFT ms:\n"
      " the hand-off starts with layer 0 of the last prefill chunk, so it overlaps prefill; h-off exposed is its\n"
      " part after the first token; TTFT-prefill = median over trials of ttft_ns - prefill_ns)\n");
  for (const Result& r : results) {
    if (r.have_disagg && !r.match) {
      std::string got;
      for (int64_t t : r.disagg_tokens) absl::StrAppend(&got, got.empty() ? "" : ",", t);
      std::printf("MISMATCH at len %lld: in-process %lld%s, disaggregated %s\n", static_cast<long long>(r.len),
                  static_cast<long long>(r.single_token), r.single_consistent ? "" : " (not stable across trials)",
                  got.c_str());
    }
  }
  return any_mismatch;
}

void WriteCsv(const std::string& csv, const std::vector<Result>& results) {
  std::ofstream f(csv, std::ios::trunc);
  f << "prompt_len,single_ttft_ms,disagg_ttft_ms,client_ttft_ms,prefill_ms,handoff_bytes,handoff_ms,"
       "handoff_ttft_pct,handoff_exposed_ms,ttft_minus_prefill_ms,first_token,match\n";
  for (const Result& r : results) {
    auto col = [&](double v, int prec) { return r.have_disagg ? Fixed(v, prec) : std::string(); };
    const std::string share = r.have_disagg && r.ttft_ms > 0 ? Fixed(100.0 * r.handoff_ms / r.ttft_ms, 2) : "";
    f << r.len << "," << Fixed(r.single_ms, 3) << "," << col(r.ttft_ms, 3) << "," << col(r.client_ms, 3) << ","
      << col(r.prefill_ms, 3) << "," << col(r.handoff_bytes, 0) << "," << col(r.handoff_ms, 3) << "," << share
      << "," << col(r.handoff_exposed_ms, 3) << "," << col(r.exposed_ms, 3) << "," << r.single_token << ","
      << (!r.have_disagg ? "" : r.match ? "match" : "MISMATCH") << "\n";
  }
  if (!f) pdserve::Die("cannot write '" + csv + "'");
  std::printf("wrote %zu rows to %s\n", results.size(), csv.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pdserve::InitCli(
      argc, argv,
      "Time to first token at several prompt lengths: in one process (Engine NewSequence + Prefill +\n"
      "greedy Sample, what pdserve-generate does before its first token) and, with --router, through a\n"
      "running pdserve stack (Generate with token_ids = the same prompt, max_new_tokens = 1, greedy).\n"
      "Usage: pdserve-ttft-bench --model DIR [--router HOST:PORT] [--prompt-lens 128,512,1024,2048]\n"
      "       [--trials 3] [--kv-dtype f32|bf16] [--weights-dtype f32|bf16|int8] [--threads N] [--prefill-chunk N]\n"
      "       [--bf16-matmul auto|widen|split|amx|dot] [--csv-out FILE] [--deadline-s 600]\n"
      "Prompts are the ids (i*7919 + 13) % vocab_size, i in [0, len). Every value is the median over\n"
      "--trials, after one untimed warmup of the shortest prompt per mode. Columns: single = in-process\n"
      "TTFT; disagg = the router's Usage.ttft_ns (request in to first token out); client = call start to\n"
      "the first message with tokens, seen by this process; prefill = Usage.prefill_ns; hand-off bytes/ms =\n"
      "Usage.kv_handoff_bytes/_ns; hand-off/TTFT = kv_handoff_ns / ttft_ns (the hand-off overlaps the\n"
      "last prefill chunk, so this is not purely added time); h-off exposed = Usage.kv_handoff_exposed_ns\n"
      "(commit after the first token to the acknowledgement); TTFT-prefill = what disaggregation exposes\n"
      "beyond the prefill compute (RPCs, the hand-off tail, decode admission, streaming). The first-token\n"
      "column compares the stack's first token with the in-process one: match or MISMATCH (exit 3).\n"
      "Fairness: start the stack with the same --threads (and --kv-dtype, --weights-dtype, --prefill-chunk)\n"
      "as this tool. All in-process trials run first, then all gRPC trials (never interleaved), but two\n"
      "LibTorch processes whose OpenMP threads spin on the same cores still slow each other 5-15x: for a\n"
      "fair comparison pin both with taskset, e.g. on 2 cores\n"
      "  taskset -c 0 pdserve-local --model DIR --port 50191 --threads 1 &\n"
      "  taskset -c 1 pdserve-ttft-bench --model DIR --router 127.0.0.1:50191 --threads 1\n"
      "Progress goes to stderr, the table to stdout.");

  const Options o = ParseOptions();
  std::unique_ptr<pdserve::Engine> engine = LoadEngine(o);
  const pdserve::ModelConfig& c = engine->config();
  const std::string model_name = c.name;
  const int64_t vocab = c.vocab_size;
  std::printf("pdserve-ttft-bench: model %s (%s), weights %s, kv dtype %s, threads %d (requested %d), prefill chunk %lld, "
              "bf16 matmul %s\n",
              model_name.c_str(), o.model_dir.c_str(), o.wd.c_str(), o.kd.c_str(), at::get_num_threads(),
              o.eo.num_threads, static_cast<long long>(o.eo.prefill_chunk),
              pdserve::Bf16MatmulName(pdserve::GetBf16Matmul()));
  std::printf("router: %s; %d trial(s) per length, medians reported\n",
              o.router.empty() ? "none (single-process only)" : o.router.c_str(), o.trials);

  std::vector<Result> results(o.lens.size());
  for (size_t k = 0; k < o.lens.size(); ++k) results[k].len = o.lens[k];
  RunSinglePhase(*engine, o, &results);
  // Free the in-process engine (its weights and threads' work) before the
  // stack runs; the gRPC phase needs only the prompts.
  engine.reset();
  if (!o.router.empty()) RunDisaggPhase(o, vocab, &results);

  const bool any_mismatch = PrintTable(results);
  if (!o.csv.empty()) WriteCsv(o.csv, results);
  return any_mismatch ? 3 : 0;
}
