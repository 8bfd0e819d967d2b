// pdserve-int8-quality: how closely quantized weights follow fp32 on random
// weights of a config: logits cosine and greedy top-1 agreement over N
// teacher-forced steps (common/engine/logits_agreement.h).
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/logits_agreement.h"
#include "common/model/checkpoint.h"

ABSL_FLAG(std::string, config, "configs/tiny.json", "Model config (random weights).");
ABSL_FLAG(std::string, dtype, "int8", "Weights dtype to compare against f32: bf16 or int8.");
ABSL_FLAG(int64_t, steps, 1000, "Greedy decode steps.");
ABSL_FLAG(int64_t, prompt_len, 32, "Prompt tokens.");
ABSL_FLAG(uint64_t, seed, 1, "Random weights seed.");

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "pdserve-int8-quality: logits cosine and top-1 agreement of bf16/int8 weights against f32.\n"
                   "Usage: pdserve-int8-quality --config configs/small.json [--dtype int8] [--steps 1000]");
  auto cfg = pdserve::LoadModelConfig(absl::GetFlag(FLAGS_config));
  if (!cfg.ok()) pdserve::Die(cfg.status(), 2);
  auto dtype = pdserve::ParseWeightsDtype(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) pdserve::Die(dtype.status(), 2);
  pdserve::ModelWeights w = pdserve::RandomWeights(*cfg, absl::GetFlag(FLAGS_seed));
  pdserve::ModelWeights wq = w;
  pdserve::ConvertWeights(&wq, *dtype);
  auto ref = pdserve::Engine::FromWeights(std::move(w)), test = pdserve::Engine::FromWeights(std::move(wq));
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < absl::GetFlag(FLAGS_prompt_len); ++i) prompt.push_back((i * 131 + 7) % cfg->vocab_size);
  auto r = pdserve::CompareGreedy(*ref, *test, prompt, absl::GetFlag(FLAGS_steps));
  if (!r.ok()) pdserve::Die(r.status(), 1);
  std::printf("%s, %s vs f32, seed %llu: %lld rows, logits cosine min %.6f mean %.6f, top-1 agreement %lld/%lld = %.2f%%\n",
              cfg->name.c_str(), absl::GetFlag(FLAGS_dtype).c_str(),
              static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)), static_cast<long long>(r->steps),
              r->min_cosine, r->mean_cosine, static_cast<long long>(r->top1_agree), static_cast<long long>(r->steps),
              100.0 * r->top1_rate());
  return 0;
}
