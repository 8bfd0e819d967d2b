// The pdserve-train loop: AdamW with linear warmup and cosine decay, global
// gradient clipping, the routers' load-balancing loss, checkpoints in the
// docs/model.md safetensors layout every N steps (written atomically, with
// the optimizer state, so an interrupted run loses only the steps since the
// last one), --resume, a progress line and CSV logs, and an evaluation set
// drawn from its own seeds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model/config.h"

namespace pdserve {

struct TrainOptions {
  ModelConfig config;
  std::string out_dir;       // checkpoint/, final/, loss.csv, eval.csv
  std::string resume_dir;    // a checkpoint/ written by an earlier run; empty: start fresh
  uint64_t seed = 1;         // weights and data: the whole run is a function of it
  int threads = 2;
  bool bf16_matmuls = false;      // TrainModel's bf16 matmuls (for CPUs with AMX)

  int64_t steps = 1000;
  int64_t batch_size = 16;
  int64_t train_tokens = 512;     // the longest prompt trained on
  int64_t min_tokens = 0;         // the shortest; 0: the passkey prompt without filler
  int64_t curriculum_steps = 0;   // prompts grow from min to train_tokens over these steps

  double lr = 2e-3;
  double min_lr_ratio = 0.1;      // cosine decays to lr * this
  int64_t warmup_steps = 100;
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  double lm_weight = 0.1;         // next-byte loss on the prompt, beside the answer loss
  double aux_weight = 0.01;       // the routers' load-balancing loss

  int64_t checkpoint_every = 200;
  int64_t log_every = 10;
  int64_t eval_every = 500;       // 0: only at the end
  int64_t eval_examples = 64;     // per length
  std::vector<int64_t> eval_lengths;  // empty: train_tokens and 4x train_tokens (within max_context)
};

// Checks the options against each other and the model: InvalidArgument
// naming the value (a config the engine rejects, a length above max_context
// or below the shortest passkey prompt, non-positive counts).
absl::Status ValidateTrainOptions(const TrainOptions& options);

// Runs the whole training. Errors: InvalidArgument for bad options or a
// resume checkpoint of another config or seed; NotFound/DataLoss from the
// checkpoint loader; Internal for LibTorch failures.
absl::Status RunTraining(const TrainOptions& options);

}  // namespace pdserve
