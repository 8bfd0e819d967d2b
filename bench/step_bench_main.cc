// pdserve-step-bench: the decode worker's step alone. For each batch size B,
// B sequences with short prompts run `--steps` batched Engine::DecodeStep
// calls (plus sampling), with no serving, no prefill and no other process
// in the way. Prints ms per step, output tokens/s, the ratio to B = 1, and
// the weight bytes a step must read at least (every dense weight once, the
// experts the batch routes to) over the step time: the achieved bandwidth.
// The engine flags (--model, --weights-dtype, --kv-dtype, --threads,
// --prefill-chunk) are common/engine/engine_flags, with their defaults
// (f32 weights: pass --weights-dtype bf16 for the bf16 step).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "bench/bench_clock.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/engine_flags.h"
#include "common/util/omp_env.h"
#include "common/kernels/kmajor_packs.h"

ABSL_FLAG(std::string, batch_sizes, "1,2,4,8,16,32", "Batch sizes to time.");
ABSL_FLAG(int64_t, steps, 16, "Timed decode steps per batch size (after 2 untimed ones).");
ABSL_FLAG(int64_t, prompt_len, 16, "Prompt tokens of each sequence.");
ABSL_FLAG(double, temperature, 0.0,
          "Sampling temperature of every sequence (0: greedy); with --top-p, times what a decode worker's step pays "
          "for non-greedy requests. Each step samples all rows with Engine::SampleRows, as the decode worker does.");
ABSL_FLAG(double, top_p, 1.0, "Nucleus mass of every sequence (1: all).");
ABSL_FLAG(bool, alternate_kmajor, false,
          "With --bf16-matmul kmajor: time each batch size twice in a row, first with the row-major matrices "
          "(widen's decode kernels) then with the k-major packs, in this one process: a comparison that a noisy "
          "machine's drift between runs does not swamp. Give a batch size several times for several pairs. "
          "The model then keeps its row-major bf16 matrices beside the packs (twice the memory).");

namespace {

using pdserve::bench::Clock;
using pdserve::bench::MsSince;

// Bytes of the weights one step over `batch` must read: everything but the
// experts, plus each expert some row of the batch routed to (counted as all
// experts once B * top_k >= n_experts, a lower bound otherwise).
double StepWeightBytes(const pdserve::ModelConfig& c, int64_t batch, double elem) {
  const double d = static_cast<double>(c.d_model);
  const double attn = d * c.n_heads * c.head_dim * 2 + d * c.n_kv_heads * c.head_dim * 2;
  const double expert = 3.0 * d * c.expert_hidden;
  const double used = std::min<double>(c.n_experts, static_cast<double>(batch * c.top_k));
  const double layer = attn + expert * (c.n_shared_experts + used) + d * c.n_experts;
  return (c.n_layers * layer + d * c.vocab_size) * elem;
}

// B sequences with short prompts, then ms per step of `steps` batched
// decode steps (after 2 untimed ones). Dies on an engine error.
double TimeSteps(const pdserve::Engine& e, int64_t b, int64_t steps, int64_t prompt_len,
                 const pdserve::SamplingParams& sampling) {
  const pdserve::ModelConfig& c = e.config();
  std::vector<std::unique_ptr<pdserve::Sequence>> seqs;
  std::vector<pdserve::Sequence*> ptrs;
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < b; ++i) {
    seqs.push_back(e.NewSequence());
    std::vector<int64_t> prompt;
    for (int64_t t = 0; t < prompt_len; ++t) prompt.push_back((t * 131 + i * 17 + 3) % c.vocab_size);
    auto logits = e.Prefill(seqs.back().get(), prompt);
    if (!logits.ok()) pdserve::Die(logits.status(), 1);
    ptrs.push_back(seqs.back().get());
    tokens.push_back(e.Sample(*logits, sampling, 0));
  }
  std::vector<pdserve::SamplingParams> params(static_cast<size_t>(b), sampling);
  std::vector<uint64_t> draw(static_cast<size_t>(b));
  Clock::time_point t0;
  for (int64_t s = 0; s < steps + 2; ++s) {
    if (s == 2) t0 = Clock::now();
    auto logits = e.DecodeStep(ptrs, tokens);
    if (!logits.ok()) pdserve::Die(logits.status(), 1);
    std::fill(draw.begin(), draw.end(), static_cast<uint64_t>(s + 1));
    tokens = e.SampleRows(*logits, params, draw);
  }
  return MsSince(t0) / steps;
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  pdserve::InitCli(argc, argv,
                   "pdserve-step-bench: batched decode step time of the Engine against batch size.\n"
                   "Usage: pdserve-step-bench --model DIR [--weights-dtype f32|bf16|int8] [--batch-sizes 1,2,4,8,16,32]\n"
                   "       [--steps 16] [--prompt-len 16] [--threads 0] [--bf16-matmul kmajor [--alternate-kmajor]]\n"
                   "       [--temperature 0 [--top-p 1]]");
  auto flags = pdserve::EngineFlagsFromCommandLine();
  if (!flags.ok()) pdserve::Die(flags.status(), 2);
  const pdserve::EngineOptions& eo = flags->options;
  auto sizes = pdserve::ParseIdList(absl::GetFlag(FLAGS_batch_sizes));
  if (!sizes.ok() || sizes->empty()) pdserve::Die("--batch-sizes must be a list of positive integers", 2);
  const int64_t steps = absl::GetFlag(FLAGS_steps), prompt_len = absl::GetFlag(FLAGS_prompt_len);
  if (steps < 1 || prompt_len < 1) pdserve::Die("--steps and --prompt-len must be >= 1", 2);
  pdserve::SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  if (!(sampling.temperature >= 0 && sampling.top_p > 0 && sampling.top_p <= 1)) {
    pdserve::Die("--temperature must be >= 0 and --top-p in (0, 1]", 2);
  }
  // Hiding the packs needs the row-major matrices they would replace.
  if (absl::GetFlag(FLAGS_alternate_kmajor)) pdserve::SetKMajorKeepsRowMajor(true);
  auto engine = pdserve::Engine::Load(flags->model_dir, eo);
  if (!engine.ok()) pdserve::Die(engine.status(), 1);
  const pdserve::Engine& e = **engine;
  const pdserve::ModelConfig& c = e.config();
  // Bytes per weight: int8 is Q8_0, 34 bytes per block of 32.
  const double elem = eo.weights_dtype == pdserve::WeightsDtype::kBF16   ? 2.0
                      : eo.weights_dtype == pdserve::WeightsDtype::kInt8 ? 34.0 / 32.0
                                                                         : 4.0;

  std::printf("%s, %s weights, %d threads, %lld steps per point, %s\n", c.name.c_str(),
              absl::GetFlag(FLAGS_weights_dtype).c_str(), at::get_num_threads(), static_cast<long long>(steps),
              sampling.temperature > 0 ? absl::StrFormat("temperature %g, top_p %g", sampling.temperature,
                                                         sampling.top_p).c_str()
                                       : "greedy");
  const bool alternate = absl::GetFlag(FLAGS_alternate_kmajor);
  std::printf("%5s %10s %10s %10s %12s %10s%s\n", "batch", "ms/step", "tok/s", "x batch 1", "weights MB", "GB/s",
              alternate ? "  kernels" : "");
  double base = 0;
  for (int64_t b : *sizes) {
    for (int pass = 0; pass < (alternate ? 2 : 1); ++pass) {
      if (alternate) pdserve::SetKMajorPacksInUse(pass == 1);
      const double ms = TimeSteps(e, b, steps, prompt_len, sampling);
      const double tps = 1000.0 * b / ms;
      if (base == 0) base = tps;
      const double bytes = StepWeightBytes(c, b, elem);
      std::printf("%5lld %10.1f %10.1f %10.2f %12.0f %10.1f%s\n", static_cast<long long>(b), ms, tps, tps / base,
                  bytes / 1e6, bytes / ms / 1e6, alternate ? (pass == 1 ? "  kmajor" : "  rows") : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
