// pdserve-train: trains a GPT-OSS-Lite checkpoint on synthetic passkey
// retrieval (the prompts of pdserve-passkey) with LibTorch autograd.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli/cli_util.h"
#include "common/util/omp_env.h"
#include "train/train_model.h"
#include "train/trainer.h"

ABSL_FLAG(std::string, config, "", "Model config JSON (byte tokenizer), e.g. configs/passkey-4l.json.");
ABSL_FLAG(std::string, out, "", "Output directory: checkpoint/ (F32 + optimizer), final/ (BF16), loss.csv, eval.csv.");
ABSL_FLAG(std::string, resume, "", "Continue from this checkpoint directory (OUT/checkpoint of an earlier run "
                                   "with the same --config and --seed).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and of the training data.");
ABSL_FLAG(int32_t, threads, 2, "Intra-op threads.");
ABSL_FLAG(std::string, matmul_dtype, "auto", "Matmul operands: f32, bf16 (fp32 accumulation and master weights), "
                                           "or auto: bf16 where the CPU has AMX, else f32.");
ABSL_FLAG(int64_t, steps, 1000, "Optimizer steps in all (a resumed run continues to this count).");
ABSL_FLAG(int64_t, batch_size, 16, "Sequences per step.");
ABSL_FLAG(int64_t, train_tokens, 512, "Longest prompt trained on, in tokens (bytes).");
ABSL_FLAG(int64_t, min_tokens, 0, "Shortest prompt; 0: the passkey prompt without filler.");
ABSL_FLAG(int64_t, curriculum_steps, 0, "Steps over which the longest prompt grows from --min-tokens to "
                                        "--train-tokens; 0: none.");
ABSL_FLAG(double, lr, 2e-3, "Peak learning rate (AdamW).");
ABSL_FLAG(double, min_lr_ratio, 0.1, "The cosine decays to lr * this.");
ABSL_FLAG(int64_t, warmup_steps, 100, "Linear warmup steps.");
ABSL_FLAG(double, weight_decay, 0.01, "AdamW weight decay (matmul weights only).");
ABSL_FLAG(double, clip_norm, 1.0, "Global gradient-norm clip.");
ABSL_FLAG(double, lm_weight, 0.1, "Weight of the next-byte loss on the prompt beside the answer loss.");
ABSL_FLAG(double, aux_weight, 0.01, "Weight of the routers' load-balancing loss.");
ABSL_FLAG(int64_t, checkpoint_every, 200, "Write OUT/checkpoint every N steps (and at the end).");
ABSL_FLAG(int64_t, log_every, 10, "Progress line every N steps.");
ABSL_FLAG(int64_t, eval_every, 500, "Evaluate on the held-out set every N steps; 0: at the end only.");
ABSL_FLAG(int64_t, eval_examples, 64, "Held-out examples per evaluation length.");
ABSL_FLAG(std::string, eval_lengths, "", "Comma-separated evaluation prompt lengths; empty: --train-tokens and "
                                         "4x that.");

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  pdserve::InitCli(argc, argv,
                   "Trains a GPT-OSS-Lite model on synthetic passkey retrieval (LibTorch autograd).\n"
                   "Usage: pdserve-train --config configs/passkey-4l.json --out DIR [--steps N --seed S "
                   "--threads T] [--resume DIR/checkpoint]");
  pdserve::TrainOptions o;
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) pdserve::Die("--config is required", 2);
  auto config = pdserve::LoadModelConfig(config_path);
  if (!config.ok()) pdserve::Die(config.status(), 2);
  o.config = *config;
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.resume_dir = absl::GetFlag(FLAGS_resume);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.threads = absl::GetFlag(FLAGS_threads);
  const std::string mm = absl::GetFlag(FLAGS_matmul_dtype);
  if (mm != "auto" && mm != "f32" && mm != "bf16") pdserve::Die("--matmul-dtype must be auto, f32 or bf16, got '" + mm + "'", 2);
  o.bf16_matmuls = mm == "bf16" || (mm == "auto" && pdserve::CpuHasFastBf16Matmul());
  std::fprintf(stderr, "matmuls in %s%s\n", o.bf16_matmuls ? "bf16" : "f32", mm == "auto" ? " (auto)" : "");
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.train_tokens = absl::GetFlag(FLAGS_train_tokens);
  o.min_tokens = absl::GetFlag(FLAGS_min_tokens);
  o.curriculum_steps = absl::GetFlag(FLAGS_curriculum_steps);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.min_lr_ratio = absl::GetFlag(FLAGS_min_lr_ratio);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.clip_norm = absl::GetFlag(FLAGS_clip_norm);
  o.lm_weight = absl::GetFlag(FLAGS_lm_weight);
  o.aux_weight = absl::GetFlag(FLAGS_aux_weight);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_examples = absl::GetFlag(FLAGS_eval_examples);
  for (absl::string_view item : absl::StrSplit(absl::GetFlag(FLAGS_eval_lengths), ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v)) pdserve::Die("--eval-lengths: '" + std::string(item) + "' is not an integer", 2);
    o.eval_lengths.push_back(v);
  }
  if (absl::Status st = pdserve::ValidateTrainOptions(o); !st.ok()) pdserve::Die(st, 2);
  if (absl::Status st = pdserve::RunTraining(o); !st.ok()) pdserve::Die(st);
  return 0;
}
