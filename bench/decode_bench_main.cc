// pdserve-decode-bench: batch-1 decode speed of the Engine. Checks that the
// cached and no-cache loops agree token for token, then times every decode
// step (cached) and every full replay (no cache) against position, reports
// tokens/s, resident memory, the BLAS/threads in use, and the ratio of the
// measured step time to a memory-bandwidth floor. Optionally profiles decode
// steps by ATen op, and times each weight shape's matrix-vector product alone
// (engine vs at::linear vs at::mv; bench/matvec_probe.h). docs/benchmarks.md §3 explains
// the output; bench/host_report.h prints the machine and process conditions.
// The engine flags (--model, --weights-dtype, --kv-dtype, --threads,
// --prefill-chunk) are common/engine/engine_flags; the ones here are this
// benchmark's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_clock.h"
#include "bench/host_report.h"
#include "bench/matvec_probe.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/engine_flags.h"
#include "common/kernels/bf16_matmul.h"
#include "common/model/huge_page_arena.h"
#include "common/kernels/linear_int8.h"
#include "common/util/omp_env.h"

ABSL_FLAG(std::string, config, "",
          "Model config JSON: build random weights in memory (with --seed) instead of --model.");
ABSL_FLAG(uint64_t, seed, 0, "Seed for the random weights of --config.");
ABSL_FLAG(int64_t, prompt_len, 32, "Prompt length in tokens (deterministic ids).");
ABSL_FLAG(std::string, new_tokens, "64,256,512,1024",
          "Decode lengths to report tokens/s at (one cached run of the largest).");
ABSL_FLAG(int64_t, no_cache_max, 256, "Tokens to generate with the no-cache loop (quadratic cost).");
ABSL_FLAG(int64_t, parity_tokens, 32,
          "Greedy tokens that the cached and no-cache loops must agree on (0 skips the check: two fewer "
          "prefills of the prompt, for long prompts).");
ABSL_FLAG(std::string, csv_out, "", "Write per-step rows (loop,position,ms,rss_mb) to this CSV file.");
ABSL_FLAG(double, bw_gib, 1.0, "Size of the buffer summed to measure read bandwidth, GiB.");
ABSL_FLAG(int, bw_reps, 5, "Passes over the bandwidth buffer (the best is kept).");
ABSL_FLAG(double, bw_gbs, 0.0, "Use this read bandwidth (GB/s) instead of measuring it.");
ABSL_FLAG(int64_t, profile_steps, 0, "After the timed run, profile this many more cached decode steps by ATen op.");
ABSL_FLAG(bool, show_config, false, "Print the full at::show_config() text.");

namespace {

using namespace pdserve::bench;  // NOLINT(build/namespaces): bench_clock.h, host_report.h, matvec_probe.h


double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Row {
  std::string loop;
  int64_t position;
  double ms;
  double rss_mb;
};

// Self and inclusive CPU time per ATen op (main-thread ranges), and the
// inclusive time of aten::linear grouped by weight shape.
void PrintProfile(const torch::autograd::profiler::thread_event_lists& lists, int64_t steps, double wall_ms) {
  using torch::autograd::profiler::EventKind;
  using torch::autograd::profiler::LegacyEvent;
  struct Agg {
    double self_us = 0, incl_us = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Agg> by_name;
  std::map<std::string, Agg> linear_by_shape;
  double top_level_us = 0;
  for (const auto& list : lists) {
    struct Open {
      const LegacyEvent* ev;
      double child_us;
    };
    std::vector<Open> stack;
    for (const LegacyEvent& ev : list) {
      if (ev.kind() == EventKind::PushRange) {
        stack.push_back({&ev, 0.0});
      } else if (ev.kind() == EventKind::PopRange && !stack.empty()) {
        Open o = stack.back();
        stack.pop_back();
        const double incl = o.ev->cpuElapsedUs(ev);
        Agg& a = by_name[o.ev->name()];
        a.self_us += incl - o.child_us;
        a.incl_us += incl;
        ++a.calls;
        if (std::string(o.ev->name()) == "aten::linear") {
          const auto shapes = o.ev->shapes();
          std::string key = "?";
          if (shapes.size() >= 2) key = absl::StrCat("[", absl::StrJoin(shapes[1], ","), "]");
          Agg& l = linear_by_shape[key];
          l.incl_us += incl;
          ++l.calls;
        }
        if (stack.empty()) {
          top_level_us += incl;
        } else {
          stack.back().child_us += incl;
        }
      }
    }
  }
  std::vector<std::pair<std::string, Agg>> ops(by_name.begin(), by_name.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  std::printf(
      "\nprofile of %lld cached decode steps (legacy ATen profiler, times per step; the profiler adds overhead):\n",
      static_cast<long long>(steps));
  std::printf(
      "  wall with the profiler on: %.2f ms/step; inside top-level ATen ops: %.2f ms/step; outside them "
      "(our own kernels, e.g. the gemv of pdserve::Linear, and glue): %.2f ms/step\n",
      wall_ms / steps, top_level_us / 1000.0 / steps, wall_ms / steps - top_level_us / 1000.0 / steps);
  std::printf("  %-34s %10s %10s %8s %6s\n", "op (by self time)", "self ms", "incl ms", "calls", "self%");
  for (size_t i = 0; i < ops.size() && i < 15; ++i) {
    const Agg& a = ops[i].second;
    std::printf("  %-34s %10.3f %10.3f %8.1f %5.1f%%\n", ops[i].first.c_str(), a.self_us / 1000.0 / steps,
                a.incl_us / 1000.0 / steps, static_cast<double>(a.calls) / steps,
                100.0 * a.self_us / std::max(1.0, top_level_us));
  }
  std::vector<std::pair<std::string, Agg>> lin(linear_by_shape.begin(), linear_by_shape.end());
  std::sort(lin.begin(), lin.end(), [](const auto& a, const auto& b) { return a.second.incl_us > b.second.incl_us; });
  if (!lin.empty()) std::printf("  %-34s %10s %8s %6s\n", "aten::linear by weight shape", "incl ms", "calls", "share");
  for (const auto& [k, a] : lin) {
    std::printf("  %-34s %10.3f %8.1f %5.1f%%\n", k.c_str(), a.incl_us / 1000.0 / steps,
                static_cast<double>(a.calls) / steps, 100.0 * a.incl_us / std::max(1.0, top_level_us));
  }
}



// ---- Options: the flags, checked (bad values exit 2).

struct Options {
  std::string model_dir, config_path;
  uint64_t seed = 0;
  std::string wd, kd;  // --weights-dtype and --kv-dtype as given
  pdserve::EngineOptions eo;
  int64_t prompt_len = 0, no_cache_max = 0, parity_tokens = 0, profile_steps = 0;
  std::vector<int64_t> counts;  // --new-tokens, sorted
  int64_t max_new = 0;          // the largest count: the cached run's length
  std::string csv;
  double bw_gib = 0, bw_gbs = 0;
  int bw_reps = 0;
  bool show_config = false;
};

Options ParseOptions() {
  Options o;
  o.model_dir = absl::GetFlag(FLAGS_model);
  o.config_path = absl::GetFlag(FLAGS_config);
  if (o.model_dir.empty() == o.config_path.empty()) pdserve::Die("give exactly one of --model DIR or --config FILE", 2);
  o.wd = absl::GetFlag(FLAGS_weights_dtype);
  o.kd = absl::GetFlag(FLAGS_kv_dtype);
  absl::StatusOr<pdserve::EngineOptions> engine_options = pdserve::EngineOptionsFromCommandLine();
  if (!engine_options.ok()) pdserve::Die(engine_options.status(), 2);
  o.eo = *engine_options;
  o.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  o.no_cache_max = absl::GetFlag(FLAGS_no_cache_max);
  o.parity_tokens = absl::GetFlag(FLAGS_parity_tokens);
  o.profile_steps = absl::GetFlag(FLAGS_profile_steps);
  if (o.prompt_len < 1) pdserve::Die("--prompt-len must be >= 1", 2);
  if (o.no_cache_max < 0) pdserve::Die("--no-cache-max must be >= 0", 2);
  if (o.parity_tokens < 0) pdserve::Die("--parity-tokens must be >= 0", 2);
  if (o.profile_steps < 0) pdserve::Die("--profile-steps must be >= 0", 2);
  auto counts = pdserve::ParseIdList(absl::GetFlag(FLAGS_new_tokens));
  if (!counts.ok()) pdserve::Die("--new-tokens: " + std::string(counts.status().message()), 2);
  if (counts->empty() || *std::min_element(counts->begin(), counts->end()) < 1) {
    pdserve::Die("--new-tokens needs counts >= 1", 2);
  }
  std::sort(counts->begin(), counts->end());
  o.counts = *std::move(counts);
  o.max_new = o.counts.back();
  o.seed = absl::GetFlag(FLAGS_seed);
  o.csv = absl::GetFlag(FLAGS_csv_out);
  o.bw_gib = absl::GetFlag(FLAGS_bw_gib);
  o.bw_reps = absl::GetFlag(FLAGS_bw_reps);
  o.bw_gbs = absl::GetFlag(FLAGS_bw_gbs);
  o.show_config = absl::GetFlag(FLAGS_show_config);
  return o;
}

// ---- Setup: bandwidth, the model, what the process runs on.

// The read bandwidth (GB/s) the floor divides by, and the line that reports it.
struct Bandwidth {
  double gbs = 0;
  std::string line;
};

// Measured with the current thread count and with one thread, unless
// --bw-gbs gives it. Run before the weights exist so that its buffer does not
// add to the process's peak RSS.
Bandwidth ReadBandwidth(const Options& o) {
  Bandwidth bw{o.bw_gbs, ""};
  if (bw.gbs > 0) {
    bw.line = absl::StrFormat("read bandwidth: %.2f GB/s (given by --bw-gbs)\n", bw.gbs);
    return bw;
  }
  double checksum = 0, bw_1t = 0;
  const int threads = at::get_num_threads();
  bw.gbs = MeasureReadBandwidth(o.bw_gib, o.bw_reps, &checksum);
  if (threads > 1) {
    at::set_num_threads(1);
    bw_1t = MeasureReadBandwidth(o.bw_gib, o.bw_reps, &checksum);
    at::set_num_threads(threads);
  }
  bw.line = absl::StrFormat("read bandwidth (best of %d sums of a %.2f GiB fp32 buffer on %s pages): %.2f GB/s with %d threads",
                            o.bw_reps, o.bw_gib, pdserve::HugePagesEnabled() ? "2 MiB" : "4 KiB", bw.gbs, threads);
  if (bw_1t > 0) bw.line += absl::StrFormat(", %.2f GB/s with 1 thread", bw_1t);
  bw.line += absl::StrFormat(" (checksum %.0f)\n", checksum);
  return bw;
}

struct LoadedModel {
  std::unique_ptr<pdserve::Engine> engine;
  std::string source;  // where the weights came from, for the header
  double load_ms = 0;
};

// A checkpoint (--model) or random weights of --config, cast as LoadCheckpoint
// does for bf16.
LoadedModel LoadModel(const Options& o) {
  LoadedModel m;
  const auto t_load = Clock::now();
  if (!o.model_dir.empty()) {
    auto e = pdserve::Engine::Load(o.model_dir, o.eo);
    if (!e.ok()) pdserve::Die(e.status());
    m.engine = std::move(*e);
    m.source = "checkpoint " + o.model_dir;
  } else {
    auto cfg = pdserve::LoadModelConfig(o.config_path);
    if (!cfg.ok()) pdserve::Die(cfg.status());
    pdserve::ModelWeights w = pdserve::RandomWeights(*cfg, o.seed);
    pdserve::ConvertWeights(&w, o.eo.weights_dtype);  // as LoadCheckpoint does
    m.engine = pdserve::Engine::FromWeights(std::move(w), o.eo);
    m.source = absl::StrCat("random weights from ", o.config_path, " (seed ", o.seed, ")");
  }
  m.load_ms = MsSince(t_load);
  return m;
}

// Resident memory at load time: RSS after load, the peak through it, and
// whether the peak mark could be reset for the rest of the run.
struct LoadMemory {
  double rss_after_load = 0, peak_through_load = 0;
  bool peak_reset = false;
};

LoadMemory SampleLoadMemory() {
  LoadMemory m;
  m.rss_after_load = CurrentRssMb();
  m.peak_through_load = PeakRssMb();
  m.peak_reset = ResetPeakRss();
  return m;
}

// The header: the model, its load, threads, libtorch, CPU and BLAS.
void PrintHeader(const Options& o, const LoadedModel& m, const LoadMemory& mem) {
  const pdserve::ModelConfig& c = m.engine->config();
  const int64_t weight_bytes = pdserve::WeightBytes(m.engine->model().weights());
  std::printf("== pdserve-decode-bench\n");
  std::printf("model: %s, %s: %lld params (%lld active/token), weights %s = %.1f MiB in memory, kv %s\n",
              c.name.c_str(), m.source.c_str(), static_cast<long long>(c.TotalParams()),
              static_cast<long long>(c.ActiveParams()), o.wd.c_str(), weight_bytes / 1048576.0, o.kd.c_str());
  std::printf("load %.0f ms; RSS after load %.1f MiB\n", m.load_ms, mem.rss_after_load);
  std::printf("threads: at::get_num_threads() = %d, interop = %d, hardware = %u\n", at::get_num_threads(),
              at::get_num_interop_threads(), std::thread::hardware_concurrency());
  std::printf("libtorch %s\n", TORCH_VERSION);
  std::printf("cpu: %s\n", CpuFlags().c_str());
  PrintMappedBlas();
  std::printf("at::get_parallel_info():\n%s", at::get_parallel_info().c_str());
  PrintShowConfig(o.show_config);
}

// ---- The memory-bandwidth floor: weights read once per token + the KV rows
// attention reads.
struct Floor {
  const pdserve::ModelConfig& c;
  int64_t kv_elem;  // bytes per KV element
  double bw_gbs;

  int64_t KvReadBytes(int64_t pos) const {
    int64_t rows = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      rows += pdserve::ModelConfig::IsWindowed(l) ? std::min(pos + 1, c.window) : pos + 1;
    }
    return rows * c.KvBytesPerTokenPerLayer(kv_elem);
  }
  // ms of one decode step at `pos` with weights of `weight_elem` bytes each.
  double Ms(int64_t pos, double weight_elem) const {
    return static_cast<double>(c.ActiveParams() * weight_elem + KvReadBytes(pos)) / (bw_gbs * 1e9) * 1e3;
  }
};

void PrintFloorAtPrompt(const Floor& floor, int64_t prompt_len) {
  const int64_t active = floor.c.ActiveParams();
  std::printf(
      "floor at position %lld: fp32 weights %.2f ms (%.1f tok/s), bf16 weights %.2f ms (%.1f tok/s); "
      "weight bytes/token = ActiveParams x bytes/elem = %.1f MB (f32) / %.1f MB (bf16)\n",
      static_cast<long long>(prompt_len), floor.Ms(prompt_len, 4), 1e3 / floor.Ms(prompt_len, 4),
      floor.Ms(prompt_len, 2), 1e3 / floor.Ms(prompt_len, 2), active * 4 / 1e6, active * 2 / 1e6);
}

// ---- The runs.

// Cached and no-cache greedy generation must agree token for token (also
// warms up every code path). Exits 3 when they differ; where the matmuls
// round activations (`rounding`: int8 under --q8-kernel dot, bf16 under
// --bf16-matmul dot) the tokens from `strict_tokens` on may differ: the two
// loops' last-bit differences pass through that rounding and flip
// near-tied greedy tokens of random weights (as in llama.cpp), so such a
// difference is reported, not fatal. strict_tokens is 1 with an f32 cache
// (both loops prefill the same values, so the first token must agree) and 0
// with a bf16 one (the cached prefill's global layers attend over the K/V
// rounded to bf16, the no-cache forward over the fp32 ones).
void CheckParity(const pdserve::Engine& engine, const std::vector<int64_t>& prompt, int64_t parity_tokens,
                 bool rounding, size_t strict_tokens) {
  pdserve::GenerateRequest req;
  req.prompt = prompt;
  req.max_new_tokens = parity_tokens;
  req.stop_at_eos = false;
  req.use_cache = true;
  const auto t0 = Clock::now();
  auto cached = engine.Generate(req);
  if (!cached.ok()) pdserve::Die(cached.status());
  const double cached_ms = MsSince(t0);
  req.use_cache = false;
  const auto t1 = Clock::now();
  auto plain = engine.Generate(req);
  if (!plain.ok()) pdserve::Die(plain.status());
  const double plain_ms = MsSince(t1);
  if (*cached != *plain) {
    size_t i = 0;
    while (i < cached->size() && i < plain->size() && (*cached)[i] == (*plain)[i]) ++i;
    std::fprintf(stderr, "cached:   %s\nno cache: %s\n", absl::StrJoin(*cached, ",").c_str(),
                 absl::StrJoin(*plain, ",").c_str());
    if (rounding && i >= strict_tokens) {
      std::printf("parity: cached and no-cache greedy loops agree on the first %zu of %lld tokens (this kernel "
                  "rounds activations: a near-tied token may flip%s)\n",
                  i, static_cast<long long>(parity_tokens),
                  strict_tokens == 0 ? "; the bf16 cache's rounding reaches the first one" : "");
      return;
    }
    pdserve::Die(absl::StrCat("PARITY FAILED: cached and no-cache greedy tokens differ at index ", i, " (of ",
                              parity_tokens, "); not reporting times"),
                 3);
  }
  std::printf("parity: cached and no-cache greedy loops agree on all %lld tokens (%.0f ms vs %.0f ms)\n",
              static_cast<long long>(parity_tokens), cached_ms, plain_ms);
}

// Per-step rows for the CSV and the peak of the RSS sampled after each step.
struct StepLog {
  std::vector<Row> rows;
  double peak_sampled_rss = 0;

  void Add(const char* loop, int64_t position, double ms) {
    const double rss = CurrentRssMb();
    peak_sampled_rss = std::max(peak_sampled_rss, rss);
    rows.push_back({loop, position, ms, rss});
  }
};

// One sequence, prefilled, then max_new timed decode steps. The sequence and
// its last logits stay for the op profile.
struct CachedRun {
  std::unique_ptr<pdserve::Sequence> seq;
  at::Tensor logits;
  double prefill_ms = 0;
  std::vector<int64_t> tokens;
  std::vector<double> step_ms, loop_ms;  // DecodeStep alone; sampling + DecodeStep
  int64_t kv_used = 0, kv_alloc = 0;
};

CachedRun RunCached(const pdserve::Engine& engine, const std::vector<int64_t>& prompt, int64_t max_new, StepLog* log) {
  const pdserve::SamplingParams greedy;
  CachedRun run;
  run.seq = engine.NewSequence();
  const auto t_pf = Clock::now();
  auto pf = engine.Prefill(run.seq.get(), prompt);
  if (!pf.ok()) pdserve::Die(pf.status());
  run.prefill_ms = MsSince(t_pf);
  run.logits = *pf;
  log->peak_sampled_rss = CurrentRssMb();
  for (int64_t n = 0; n < max_new; ++n) {
    const auto t_a = Clock::now();
    const int64_t tok = engine.Sample(run.logits, greedy, static_cast<uint64_t>(n));
    run.tokens.push_back(tok);
    const int64_t pos = run.seq->pos;
    const auto t_b = Clock::now();
    auto step = engine.DecodeStep({run.seq.get()}, {tok});
    if (!step.ok()) pdserve::Die(step.status());
    run.logits = step->select(0, 0);
    const double ms = MsSince(t_b);
    run.loop_ms.push_back(MsSince(t_a));
    run.step_ms.push_back(ms);
    log->Add("cached", pos, ms);
  }
  run.kv_used = run.seq->cache.UsedBytes();
  run.kv_alloc = run.seq->cache.AllocatedBytes();
  return run;
}

// Profiles `steps` more cached decode steps on the run's sequence by ATen op.
void ProfileSteps(const pdserve::Engine& engine, CachedRun* run, int64_t first_n, int64_t steps) {
  using namespace torch::autograd::profiler;
  const pdserve::SamplingParams greedy;
  enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                             /*report_input_shapes=*/true));
  const auto t0 = Clock::now();
  for (int64_t n = 0; n < steps; ++n) {
    const int64_t tok = engine.Sample(run->logits, greedy, static_cast<uint64_t>(first_n + n));
    auto step = engine.DecodeStep({run->seq.get()}, {tok});
    if (!step.ok()) pdserve::Die(step.status());
    run->logits = step->select(0, 0);
  }
  const double wall = MsSince(t0);
  thread_event_lists lists = disableProfilerLegacy();
  PrintProfile(lists, steps, wall);
}

// The no-cache loop: replays the whole prefix for every token.
struct NoCacheRun {
  std::vector<double> ms;
  int64_t agree = 0;  // leading tokens equal to the cached run's
};

NoCacheRun RunNoCache(const pdserve::Engine& engine, const std::vector<int64_t>& prompt, int64_t no_cache_max,
                      const std::vector<int64_t>& cached_tokens, StepLog* log) {
  NoCacheRun run;
  if (no_cache_max <= 0) return run;
  const pdserve::SamplingParams greedy;
  std::vector<int64_t> prefix = prompt;
  auto first = engine.ForwardNoCache(prefix);
  if (!first.ok()) pdserve::Die(first.status());
  at::Tensor lg = *first;
  bool agreeing = true;
  for (int64_t n = 0; n < no_cache_max; ++n) {
    const int64_t tok = engine.Sample(lg, greedy, static_cast<uint64_t>(n));
    if (agreeing && n < static_cast<int64_t>(cached_tokens.size()) && cached_tokens[n] == tok) {
      ++run.agree;
    } else {
      agreeing = false;
    }
    prefix.push_back(tok);
    const auto t0 = Clock::now();
    auto out = engine.ForwardNoCache(prefix);
    if (!out.ok()) pdserve::Die(out.status());
    lg = *out;
    const double ms = MsSince(t0);
    run.ms.push_back(ms);
    log->Add("nocache", static_cast<int64_t>(prefix.size()) - 1, ms);
  }
  return run;
}

// ---- The report.

void WriteCsv(const std::string& csv, const std::vector<Row>& rows) {
  std::ofstream f(csv, std::ios::trunc);
  f << "loop,position,ms,rss_mb\n";
  char buf[128];
  for (const Row& r : rows) {
    std::snprintf(buf, sizeof buf, "%s,%lld,%.4f,%.1f\n", r.loop.c_str(), static_cast<long long>(r.position), r.ms,
                  r.rss_mb);
    f << buf;
  }
  if (!f) pdserve::Die("cannot write '" + csv + "'");
}

// tok/s, ms/token and the floor for every --new-tokens count.
void PrintCachedTable(const Options& o, const CachedRun& run, const Floor& floor) {
  // Bytes per weight: int8 is Q8_0, 34 bytes per 32 (the scales included).
  const double my_elem = o.wd == "bf16" ? 2.0 : o.wd == "int8" ? 34.0 / 32.0 : 4.0;
  const double other_elem = o.wd == "f32" ? 2.0 : 4.0;
  std::printf("\nprefill of %lld tokens: %.1f ms\n", static_cast<long long>(o.prompt_len), run.prefill_ms);
  std::printf("\ncached decode (batch 1, greedy; tok/s = N / wall of N steps, each = sampling + DecodeStep):\n");
  std::printf("  %8s %9s %12s %12s %12s %13s %9s\n", "N", "tok/s", "mean ms/tok", "median ms", "floor ms",
              "other floor", "x floor");
  for (int64_t N : o.counts) {
    double loop_sum = 0, floor_sum = 0, floor_other = 0;
    std::vector<double> steps(run.step_ms.begin(), run.step_ms.begin() + N);
    for (int64_t i = 0; i < N; ++i) {
      loop_sum += run.loop_ms[i];
      floor_sum += floor.Ms(o.prompt_len + i, my_elem);
      floor_other += floor.Ms(o.prompt_len + i, other_elem);
    }
    const double mean = loop_sum / N;
    std::printf("  %8lld %9.2f %12.2f %12.2f %12.2f %13.2f %8.2fx\n", static_cast<long long>(N), 1e3 * N / loop_sum,
                mean, Median(steps), floor_sum / N, floor_other / N, mean / (floor_sum / N));
  }
  std::printf(
      "  floor ms = (ActiveParams x %.4g B + KV rows read x %lld B) / %.2f GB/s (this run's weights %s);\n"
      "  other floor = the same with %s weights. x floor = mean ms/tok / floor ms.\n",
      my_elem, static_cast<long long>(floor.kv_elem), floor.bw_gbs, o.wd.c_str(), other_elem == 2.0 ? "bf16" : "fp32");
}

// One row of ms per token at a few positions: the median of the (up to) 9
// steps around each.
void PrintPositions(const char* name, const std::vector<double>& ms, int64_t prompt_len) {
  if (ms.empty()) return;
  std::printf("  %-8s", name);
  const int64_t n = static_cast<int64_t>(ms.size());
  for (int64_t at_i : {int64_t{0}, int64_t{31}, int64_t{63}, int64_t{127}, int64_t{255}, int64_t{511}, int64_t{1023}}) {
    if (at_i >= n) break;
    const int64_t lo = std::max<int64_t>(0, at_i - 4), hi = std::min<int64_t>(n, at_i + 5);
    std::printf("  pos %lld: %.2f", static_cast<long long>(prompt_len + at_i),
                Median(std::vector<double>(ms.begin() + lo, ms.begin() + hi)));
  }
  std::printf("\n");
}

void PrintPositionTable(const Options& o, const CachedRun& cached, const NoCacheRun& nc) {
  std::printf("\nms per token against position (median of 9 neighbouring steps):\n");
  PrintPositions("cached", cached.step_ms, o.prompt_len);
  PrintPositions("no-cache", nc.ms, o.prompt_len);
  if (!nc.ms.empty()) {
    std::printf(
        "no-cache loop: %lld tokens, %.1f s in all; its greedy tokens match the cached run's for the first %lld\n",
        static_cast<long long>(nc.ms.size()), std::accumulate(nc.ms.begin(), nc.ms.end(), 0.0) / 1e3,
        static_cast<long long>(nc.agree));
  }
}

void PrintMemory(const Options& o, const LoadMemory& mem, const StepLog& log, const CachedRun& run) {
  std::printf("\nmemory: RSS after load %.1f MiB; ru_maxrss through load (includes building the weights) %.1f MiB\n",
              mem.rss_after_load, mem.peak_through_load);
  if (mem.peak_reset) {
    std::printf(
        "        ru_maxrss since load (peak reset via /proc/self/clear_refs): %.1f MiB; peak sampled RSS %.1f MiB\n",
        PeakRssMb(), log.peak_sampled_rss);
  } else {
    std::printf("        ru_maxrss (lifetime; could not reset) %.1f MiB; peak sampled RSS %.1f MiB\n", PeakRssMb(),
                log.peak_sampled_rss);
  }
  std::printf("KV cache after %lld positions: used %.2f MiB, allocated %.2f MiB\n",
              static_cast<long long>(o.prompt_len + o.max_new), run.kv_used / 1048576.0, run.kv_alloc / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep partial output if the run is interrupted
  pdserve::InitCli(argc, argv,
                   "Batch-1 decode benchmark: cached vs no-cache parity, ms/token against position, tokens/s,\n"
                   "resident memory, BLAS/threads, and the ratio to a memory-bandwidth floor.\n"
                   "Usage: pdserve-decode-bench (--model DIR | --config CONFIG.json [--seed S])\n"
                   "       [--weights-dtype f32|bf16|int8] [--kv-dtype f32|bf16] [--prompt-len 32]\n"
                   "       [--new-tokens 64,256,512,1024] [--no-cache-max 256] [--csv-out FILE] [--threads N]");
  const Options o = ParseOptions();
  pdserve::ConfigureThreads(o.eo.num_threads);
  const Bandwidth bw = ReadBandwidth(o);
  ResetPeakRss();  // the bandwidth buffer is gone; keep it out of the load peak

  LoadedModel m = LoadModel(o);
  const pdserve::Engine& engine = *m.engine;
  const pdserve::ModelConfig& c = engine.config();
  if (o.prompt_len + std::max({o.max_new, o.no_cache_max, o.parity_tokens}) + o.profile_steps > c.max_context) {
    pdserve::Die(absl::StrCat("prompt + tokens exceeds max_context ", c.max_context), 2);
  }
  const LoadMemory mem = SampleLoadMemory();
  PrintHeader(o, m, mem);
  std::printf("%s", bw.line.c_str());
  const Floor floor{c, o.kd == "bf16" ? 2 : 4, bw.gbs};
  PrintFloorAtPrompt(floor, o.prompt_len);

  std::vector<int64_t> prompt(o.prompt_len);  // deterministic ids
  for (int64_t i = 0; i < o.prompt_len; ++i) prompt[i] = (13 + 7919 * i) % c.vocab_size;
  if (o.parity_tokens > 0) {
    const bool rounding = (o.eo.weights_dtype == pdserve::WeightsDtype::kInt8 && pdserve::Q8KernelIsDot()) ||
                          (o.eo.weights_dtype == pdserve::WeightsDtype::kBF16 &&
                           pdserve::GetBf16Matmul() == pdserve::Bf16Matmul::kDot);
    CheckParity(engine, prompt, o.parity_tokens, rounding, o.kd == "bf16" ? 0 : 1);
  }

  StepLog log;
  CachedRun cached = RunCached(engine, prompt, o.max_new, &log);
  // The matrix-vector probes take the dense experts' shapes: none for a gpt-oss checkpoint,
  // whose experts are MXFP4 (pdserve-mxfp4-bench times those kernels).
  const bool dense_experts = engine.model().weights().layers[0].mxfp4 == nullptr;
  std::vector<Probe> probes = dense_experts ? CollectProbes(engine) : std::vector<Probe>{};
  const ProbeSums sums = dense_experts ? TimeProbes(engine, &probes) : ProbeSums{};
  if (o.profile_steps > 0) ProfileSteps(engine, &cached, o.max_new, o.profile_steps);
  cached.seq.reset();
  const NoCacheRun nc = RunNoCache(engine, prompt, o.no_cache_max, cached.tokens, &log);
  if (!o.csv.empty()) WriteCsv(o.csv, log.rows);

  PrintCachedTable(o, cached, floor);
  PrintPositionTable(o, cached, nc);
  PrintMemory(o, mem, log, cached);
  if (dense_experts) PrintProbes(probes, sums, cached.step_ms);
  if (!o.csv.empty()) std::printf("wrote %zu rows to %s\n", log.rows.size(), o.csv.c_str());
  return 0;
}
