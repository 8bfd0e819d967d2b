// pdserve-int8-quality: how closely quantized weights follow fp32, on
// random weights of a config or on a checkpoint (--model): logits cosine and greedy top-1 agreement over N
// teacher-forced steps (common/engine/logits_agreement.h). The engine flags
// apply (engine_flags.h): --dtype bf16 --bf16-matmul dot measures the
// bf16-activation path.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "bench/bench_clock.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/engine_flags.h"
#include "common/engine/logits_agreement.h"
#include "common/kernels/bf16_matmul.h"
#include "common/model/checkpoint.h"
#include "common/kernels/linear_int8.h"
#include "common/model/transformer.h"

ABSL_FLAG(std::string, config, "configs/tiny.json", "Model config (random weights; ignored with --model).");
ABSL_FLAG(std::string, dtype, "int8", "Weights dtype to compare against f32: bf16, int8, or f32 (with --mantissa-bits).");
ABSL_FLAG(int32_t, mantissa_bits, 0,
          "With --dtype f32: round every matmul weight of the compared engine to this many mantissa bits "
          "(1-23, round to nearest even; 7 is bf16's rounding, 23 changes nothing): how much a given "
          "rounding of the weights alone moves the logits.");
ABSL_FLAG(int64_t, steps, 1000, "Greedy decode steps.");
ABSL_FLAG(int64_t, prompt_len, 32, "Prompt tokens.");
ABSL_FLAG(uint64_t, seed, 1, "Random weights seed.");
ABSL_FLAG(std::string, matvec_rows, "",
          "Instead: time Linear on the config's expert gate|up [2F, D] and head [V, D] shapes for these row "
          "counts (e.g. 1,16), f32 / bf16 / int8-dot / int8-fma interleaved, best of --rounds.");
ABSL_FLAG(int64_t, rounds, 5, "Rounds of the --matvec-rows timing.");

namespace {

// ms per Linear call over a pool of distinct weights (so they come from DRAM).
double TimeLinear(const at::Tensor& x, const std::vector<at::Tensor>& pool, pdserve::Q8Kernel kernel) {
  auto call = [&](const at::Tensor& w) {
    return pdserve::IsQ8(w) ? pdserve::LinearQ8(x, w, kernel) : pdserve::Linear(x, w);
  };
  call(pool[0]);
  const auto t0 = pdserve::bench::Clock::now();
  for (const at::Tensor& w : pool) call(w);
  return pdserve::bench::MsSince(t0) / pool.size();
}

void MatvecBench(const pdserve::ModelConfig& c, const std::vector<int64_t>& rows_list) {
  struct Shape { const char* name; int64_t n, k, copies; };
  const Shape shapes[] = {{"gate|up [2F,D]", 2 * c.expert_hidden, c.d_model, 16}, {"head [V,D]", c.vocab_size, c.d_model, 2}};
  const char* names[] = {"f32", "bf16", "int8-dot", "int8-fma"};
  for (const Shape& s : shapes) {
    std::vector<at::Tensor> pools[4];
    for (int64_t i = 0; i < s.copies; ++i) {
      const at::Tensor w = at::randn({s.n, s.k}) / std::sqrt(static_cast<double>(s.k));
      pools[0].push_back(w);
      pools[1].push_back(w.to(at::kBFloat16));
      pools[2].push_back(pdserve::QuantizeQ8(w));
    }
    pools[3] = pools[2];
    for (int64_t rows : rows_list) {
      const at::Tensor x = at::randn({rows, s.k});
      double best[4] = {1e30, 1e30, 1e30, 1e30};
      for (int64_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
        for (int v = 0; v < 4; ++v) {
          const auto k = v == 3 ? pdserve::Q8Kernel::kFma : pdserve::Q8Kernel::kDot;
          best[v] = std::min(best[v], TimeLinear(x, pools[v], k));
        }
      }
      std::printf("%-16s rows %3lld:", s.name, static_cast<long long>(rows));
      for (int v = 0; v < 4; ++v) std::printf("  %s %.3f ms", names[v], best[v]);
      std::printf("  (int8-dot %.2fx bf16, %.2fx int8-fma)\n", best[1] / best[2], best[3] / best[2]);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "pdserve-int8-quality: logits cosine and top-1 agreement of bf16/int8 weights against f32.\n"
                   "Usage: pdserve-int8-quality (--config configs/small.json [--seed S] | --model DIR)\n"
                   "       [--dtype int8|bf16|f32 [--mantissa-bits B]] [--steps 1000]\n"
                   "       [--bf16-matmul widen|dot|...] [--threads N]");
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (!absl::GetFlag(FLAGS_matvec_rows).empty()) {
    auto cfg = pdserve::LoadModelConfig(model_dir.empty() ? absl::GetFlag(FLAGS_config) : model_dir + "/config.json");
    if (!cfg.ok()) pdserve::Die(cfg.status(), 2);
    auto rows = pdserve::ParseIdList(absl::GetFlag(FLAGS_matvec_rows));
    if (!rows.ok() || rows->empty()) pdserve::Die("--matvec-rows must be a list of row counts", 2);
    at::NoGradGuard no_grad;
    MatvecBench(*cfg, *rows);
    return 0;
  }
  auto options = pdserve::EngineOptionsFromCommandLine();  // --bf16-matmul, --threads
  if (!options.ok()) pdserve::Die(options.status(), 2);
  auto dtype = pdserve::ParseWeightsDtype(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) pdserve::Die(dtype.status(), 2);
  pdserve::ModelWeights w;
  if (model_dir.empty()) {
    auto cfg = pdserve::LoadModelConfig(absl::GetFlag(FLAGS_config));
    if (!cfg.ok()) pdserve::Die(cfg.status(), 2);
    w = pdserve::RandomWeights(*cfg, absl::GetFlag(FLAGS_seed));
  } else {
    auto loaded = pdserve::LoadCheckpoint(model_dir);  // f32: the reference; reads config.json once
    if (!loaded.ok()) pdserve::Die(loaded.status(), 2);
    w = *std::move(loaded);
  }
  const pdserve::ModelConfig cfg = w.config;
  pdserve::ModelWeights wq = w;
  const int mantissa_bits = absl::GetFlag(FLAGS_mantissa_bits);
  if (mantissa_bits != 0) {
    if (*dtype != pdserve::WeightsDtype::kF32) {
      pdserve::Die("--mantissa-bits needs --dtype f32, got --dtype " + absl::GetFlag(FLAGS_dtype), 2);
    }
    if (absl::Status s = pdserve::RoundMatmulWeights(&wq, mantissa_bits); !s.ok()) pdserve::Die(s, 2);
  }
  pdserve::ConvertWeights(&wq, *dtype);
  const double weight_error = pdserve::RelativeWeightError(w, wq);
  auto ref = pdserve::Engine::FromWeights(std::move(w), *options);
  auto test = pdserve::Engine::FromWeights(std::move(wq), *options);
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < absl::GetFlag(FLAGS_prompt_len); ++i) prompt.push_back((i * 131 + 7) % cfg.vocab_size);
  auto r = pdserve::CompareGreedy(*ref, *test, prompt, absl::GetFlag(FLAGS_steps));
  if (!r.ok()) pdserve::Die(r.status(), 1);
  const std::string source =
      model_dir.empty() ? "seed " + std::to_string(absl::GetFlag(FLAGS_seed)) : "checkpoint " + model_dir;
  const std::string rounding =
      mantissa_bits != 0 ? " (matmul weights rounded to " + std::to_string(mantissa_bits) + " mantissa bits)" : "";
  std::printf("%s, %s%s%s vs f32, %s: %lld rows, logits cosine min %.6f mean %.6f, top-1 agreement %lld/%lld = %.2f%%; weights' relative RMS error %.3g\n",
              cfg.name.c_str(), absl::GetFlag(FLAGS_dtype).c_str(),
              *dtype == pdserve::WeightsDtype::kBF16
                  ? (std::string(" (bf16 matmul ") + pdserve::Bf16MatmulName(pdserve::GetBf16Matmul()) + ")").c_str()
                  : "",
              rounding.c_str(), source.c_str(), static_cast<long long>(r->steps),
              r->min_cosine, r->mean_cosine, static_cast<long long>(r->top1_agree), static_cast<long long>(r->steps),
              100.0 * r->top1_rate(), weight_error);
  return 0;
}
