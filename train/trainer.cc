#include "train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model/checkpoint.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"
#include "train/passkey_data.h"
#include "train/train_model.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kIgnore = -100;

// A padded batch: targets are the next token, kIgnore where there is none.
struct Batch {
  at::Tensor ids;          // [B, T] int64
  at::Tensor targets;      // [B, T] int64
  at::Tensor answer_mask;  // [B, T] fp32: 1 where the target is an answer token
  int64_t tokens = 0;      // real (unpadded) tokens
};

// Rows are padded to a multiple of kPadTo: a handful of shapes, so oneDNN
// builds its kernels a handful of times rather than once per step.
constexpr int64_t kPadTo = 64;

Batch Collate(const std::vector<PasskeyExample>& examples) {
  int64_t T = 0;
  for (const PasskeyExample& e : examples) T = std::max<int64_t>(T, static_cast<int64_t>(e.ids.size()) - 1);
  T = (T + kPadTo - 1) / kPadTo * kPadTo;
  const int64_t B = static_cast<int64_t>(examples.size());
  Batch b;
  b.ids = at::zeros({B, T}, at::kLong);
  b.targets = at::full({B, T}, kIgnore, at::kLong);
  b.answer_mask = at::zeros({B, T}, at::kFloat);
  auto ids = b.ids.accessor<int64_t, 2>();
  auto tg = b.targets.accessor<int64_t, 2>();
  auto am = b.answer_mask.accessor<float, 2>();
  for (int64_t i = 0; i < B; ++i) {
    const std::vector<int64_t>& x = examples[i].ids;
    const int64_t n = static_cast<int64_t>(x.size()) - 1;
    for (int64_t t = 0; t < n; ++t) {
      ids[i][t] = x[t];
      tg[i][t] = x[t + 1];
      if (t + 1 >= examples[i].prompt_tokens) am[i][t] = 1.0f;
    }
    b.tokens += n;
  }
  return b;
}

absl::StatusOr<std::vector<PasskeyExample>> MakeExamples(uint64_t seed, DataStream stream, int64_t step,
                                                         int64_t first, int64_t count, int64_t tokens) {
  std::vector<PasskeyExample> out;
  for (int64_t i = first; i < first + count; ++i) {
    ASSIGN_OR_RETURN(PasskeyExample e, MakePasskeyExample(ExampleSeed(seed, stream, step, i), tokens));
    out.push_back(std::move(e));
  }
  return out;
}

struct Losses {
  at::Tensor total, answer, lm, aux;
};

Losses ComputeLosses(const TrainModel& model, const Batch& b, const TrainOptions& o) {
  TrainModel::Output out = model.Forward(b.ids);
  const int64_t V = out.logits.size(-1);
  const at::Tensor ce = at::cross_entropy_loss(out.logits.reshape({-1, V}), b.targets.reshape({-1}), {},
                                               at::Reduction::None, kIgnore);
  const at::Tensor answer_w = b.answer_mask.reshape({-1});
  const at::Tensor lm_w = b.targets.reshape({-1}).ne(kIgnore).to(at::kFloat) - answer_w;
  Losses l;
  l.answer = (ce * answer_w).sum() / answer_w.sum().clamp_min(1);
  l.lm = (ce * lm_w).sum() / lm_w.sum().clamp_min(1);
  l.aux = out.aux_loss;
  l.total = l.answer + o.lm_weight * l.lm + o.aux_weight * l.aux;
  return l;
}

double LearningRate(const TrainOptions& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, o.steps - o.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

std::vector<int64_t> EvalLengths(const TrainOptions& o) {
  if (!o.eval_lengths.empty()) return o.eval_lengths;
  std::vector<int64_t> out{o.train_tokens};
  if (4 * o.train_tokens + kPasskeyAnswerTokens <= o.config.max_context) out.push_back(4 * o.train_tokens);
  return out;
}

// Exact-match accuracy of the answer under teacher forcing, which is what
// greedy decoding gives: every answer token is the argmax exactly when greedy
// generation reproduces the whole answer.
absl::StatusOr<double> EvaluateLength(const TrainModel& model, const TrainOptions& o, int64_t length) {
  at::NoGradGuard no_grad;
  // About 16M attention scores per head and batch: 4 prompts of 2048 tokens, 32 of 512.
  const int64_t per_batch = std::clamp<int64_t>((int64_t{1} << 24) / (length * length), 1, 32);
  int64_t correct = 0;
  for (int64_t first = 0; first < o.eval_examples; first += per_batch) {
    const int64_t n = std::min(per_batch, o.eval_examples - first);
    ASSIGN_OR_RETURN(std::vector<PasskeyExample> ex, MakeExamples(o.seed, DataStream::kEval, length, first, n, length));
    const Batch b = Collate(ex);
    const at::Tensor pred = model.Forward(b.ids).logits.argmax(-1);
    const at::Tensor wrong = (pred.ne(b.targets).to(at::kFloat) * b.answer_mask).sum(1);
    correct += wrong.eq(0).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(o.eval_examples);
}

// The optimizer over the model's parameters: decay on matmul weights only.
std::unique_ptr<torch::optim::AdamW> MakeOptimizer(TrainModel& model, const TrainOptions& o) {
  std::vector<at::Tensor> decay, no_decay;
  for (const TrainParam& p : model.Parameters()) (p.decay ? decay : no_decay).push_back(p.tensor);
  auto opts = torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).eps(1e-8);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(opts.weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(opts.weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
}

void SetLearningRate(torch::optim::AdamW& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

// checkpoint/ holds config.json + model.safetensors (F32) + optimizer.pt +
// train_state.json. It is written beside, then renamed over the old one.
absl::Status WriteCheckpoint(const TrainModel& model, torch::optim::AdamW& opt, const TrainOptions& o,
                             int64_t step) {
  const fs::path dir = fs::path(o.out_dir) / "checkpoint";
  const fs::path tmp = fs::path(o.out_dir) / "checkpoint.tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  RETURN_IF_ERROR(SaveCheckpoint(model.weights(), tmp.string(), StDtype::kF32));
  try {
    torch::save(opt, (tmp / "optimizer.pt").string());
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("cannot save the optimizer state: ", e.what_without_backtrace()));
  }
  {
    std::ofstream st(tmp / "train_state.json");
    st << nlohmann::json{{"step", step}, {"seed", o.seed}}.dump() << "\n";
    if (!st) return absl::InternalError(absl::StrCat("cannot write ", (tmp / "train_state.json").string()));
  }
  const fs::path old = fs::path(o.out_dir) / "checkpoint.old";
  fs::remove_all(old, ec);
  if (fs::exists(dir)) fs::rename(dir, old, ec);
  fs::rename(tmp, dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot move the checkpoint into ", dir.string(), ": ", ec.message()));
  fs::remove_all(old, ec);
  return absl::OkStatus();
}

// Loads a checkpoint/ of the same config and seed; returns the step to continue from.
absl::StatusOr<int64_t> ReadResumeState(const TrainOptions& o, ModelWeights* weights) {
  const fs::path dir(o.resume_dir);
  std::ifstream st(dir / "train_state.json");
  if (!st) return absl::NotFoundError(absl::StrCat("no train_state.json in resume directory '", o.resume_dir, "'"));
  const nlohmann::json state = nlohmann::json::parse(st, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("step") || !state["step"].is_number_integer() || !state.contains("seed")) {
    return absl::DataLossError(absl::StrCat("'", (dir / "train_state.json").string(), "' is not a training state"));
  }
  if (state["seed"].get<uint64_t>() != o.seed) {
    return absl::InvalidArgumentError(absl::StrCat("resume checkpoint was trained with --seed ",
                                                   state["seed"].get<uint64_t>(), ", not ", o.seed));
  }
  LoadOptions lo;
  lo.expected_config = &o.config;
  absl::StatusOr<ModelWeights> w = LoadCheckpoint(dir.string(), lo);
  if (!w.ok()) {
    return absl::Status(w.status().code(), absl::StrCat("resume checkpoint: ", w.status().message()));
  }
  *weights = std::move(*w);
  return state["step"].get<int64_t>();
}

std::string Eta(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  return s >= 3600 ? absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60) : absl::StrFormat("%dm%02ds", s / 60, s % 60);
}

absl::Status Evaluate(const TrainModel& model, const TrainOptions& o, int64_t step, std::ofstream& eval_csv) {
  for (int64_t length : EvalLengths(o)) {
    ASSIGN_OR_RETURN(double acc, EvaluateLength(model, o, length));
    std::fprintf(stderr, "eval step %ld: passkey at %ld tokens: %.1f%% of %ld (held-out seeds)\n",
                 static_cast<long>(step), static_cast<long>(length), 100 * acc, static_cast<long>(o.eval_examples));
    eval_csv << step << "," << length << "," << acc << "\n" << std::flush;
  }
  return absl::OkStatus();
}

absl::Status TrainLoop(const TrainOptions& o) {
  at::set_num_threads(o.threads);
  at::manual_seed(o.seed);
  ModelWeights init;
  int64_t start = 0;
  if (!o.resume_dir.empty()) {
    ASSIGN_OR_RETURN(start, ReadResumeState(o, &init));
  } else {
    init = TrainModel::InitWeights(o.config, o.seed);
  }
  TrainModel model(std::move(init), o.bf16_matmuls);
  std::unique_ptr<torch::optim::AdamW> opt = MakeOptimizer(model, o);
  if (!o.resume_dir.empty()) torch::load(*opt, (fs::path(o.resume_dir) / "optimizer.pt").string());

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", o.out_dir, "': ", ec.message()));
  const bool append = start > 0;
  const auto mode = append ? std::ios::app : std::ios::trunc;
  std::ofstream loss_csv(fs::path(o.out_dir) / "loss.csv", mode), eval_csv(fs::path(o.out_dir) / "eval.csv", mode);
  if (!append) {
    loss_csv << "step,lr,loss,answer_loss,lm_loss,aux_loss,grad_norm,prompt_tokens,tokens_per_s,elapsed_s\n";
    eval_csv << "step,length,accuracy\n";
  }
  const int64_t min_tokens = o.min_tokens > 0 ? o.min_tokens : MinPasskeyPromptTokens();
  std::vector<at::Tensor> params;
  for (const TrainParam& p : model.Parameters()) params.push_back(p.tensor);

  const auto t0 = std::chrono::steady_clock::now();
  double window_tokens = 0, window_s = 0;
  for (int64_t step = start; step < o.steps; ++step) {
    const auto s0 = std::chrono::steady_clock::now();
    const int64_t length = CurriculumLength(o.seed, step, min_tokens, o.train_tokens, o.curriculum_steps);
    ASSIGN_OR_RETURN(std::vector<PasskeyExample> ex,
                     MakeExamples(o.seed, DataStream::kTrain, step, 0, o.batch_size, length));
    const Batch b = Collate(ex);
    const double lr = LearningRate(o, step);
    SetLearningRate(*opt, lr);
    opt->zero_grad();
    Losses l = ComputeLosses(model, b, o);
    l.total.backward();
    const double gnorm = torch::nn::utils::clip_grad_norm_(params, o.clip_norm);
    opt->step();

    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    window_tokens += static_cast<double>(b.tokens);
    window_s += dt;
    const double loss = l.total.item<double>();
    if (!std::isfinite(loss)) {
      return absl::InternalError(absl::StrCat("loss is ", loss, " at step ", step, " (lr ", lr, "); lower --lr"));
    }
    loss_csv << absl::StrFormat("%d,%.6g,%.6f,%.6f,%.6f,%.6f,%.4f,%d,%.1f,%.1f\n", step + 1, lr, loss,
                                l.answer.item<double>(), l.lm.item<double>(), l.aux.item<double>(), gnorm, length,
                                b.tokens / dt, elapsed);
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.log_every == 0 || last) {
      loss_csv.flush();
      const double per_step = elapsed / static_cast<double>(step + 1 - start);
      std::fprintf(stderr, "step %ld/%ld  loss %.4f (answer %.4f, lm %.4f, aux %.3f)  lr %.2e  %.0f tok/s  "
                   "prompt %ld  elapsed %s  ETA %s\n",
                   static_cast<long>(step + 1), static_cast<long>(o.steps), loss, l.answer.item<double>(),
                   l.lm.item<double>(), l.aux.item<double>(), lr, window_tokens / window_s,
                   static_cast<long>(length), Eta(elapsed).c_str(),
                   Eta(per_step * static_cast<double>(o.steps - step - 1)).c_str());
      window_tokens = window_s = 0;
    }
    if ((step + 1) % o.checkpoint_every == 0 || last) RETURN_IF_ERROR(WriteCheckpoint(model, *opt, o, step + 1));
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      RETURN_IF_ERROR(Evaluate(model, o, step + 1, eval_csv));
    }
  }
  // The served model: the same weights in BF16.
  const fs::path final_dir = fs::path(o.out_dir) / "final";
  RETURN_IF_ERROR(SaveCheckpoint(model.weights(), final_dir.string(), StDtype::kBF16));
  std::fprintf(stderr, "wrote %s (BF16) and %s (F32, with the optimizer state)\n", final_dir.c_str(),
               (fs::path(o.out_dir) / "checkpoint").c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  absl::Status config_ok = ValidateModelConfig(o.config);
  if (!config_ok.ok()) return config_ok;
  if (o.config.tokenizer != TokenizerType::kByte || o.config.vocab_size < 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the passkey data is byte tokens: the config needs tokenizer 'byte' and vocab_size >= 256 (it has ",
        o.config.vocab_size, ")"));
  }
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  auto positive = [](int64_t v, const char* name) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("--", name, " (", v, ") must be positive"));
  };
  RETURN_IF_ERROR(positive(o.steps, "steps"));
  RETURN_IF_ERROR(positive(o.batch_size, "batch_size"));
  RETURN_IF_ERROR(positive(o.checkpoint_every, "checkpoint_every"));
  RETURN_IF_ERROR(positive(o.log_every, "log_every"));
  RETURN_IF_ERROR(positive(o.eval_examples, "eval_examples"));
  RETURN_IF_ERROR(positive(o.threads, "threads"));
  const int64_t shortest = MinPasskeyPromptTokens();
  const int64_t min_tokens = o.min_tokens > 0 ? o.min_tokens : shortest;
  for (int64_t len : std::vector<int64_t>{o.train_tokens, min_tokens}) {
    if (len + kPasskeyAnswerTokens > o.config.max_context) {
      return absl::InvalidArgumentError(absl::StrCat("data length ", len, " + ", kPasskeyAnswerTokens,
                                                     " answer tokens exceeds the model's max_context ",
                                                     o.config.max_context));
    }
  }
  if (min_tokens < shortest || o.train_tokens < min_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("need ", shortest, " <= --min_tokens (", min_tokens,
                                                   ") <= --train_tokens (", o.train_tokens,
                                                   "): the passkey prompt without filler is ", shortest,
                                                   " tokens"));
  }
  for (int64_t len : o.eval_lengths) {
    if (len < shortest || len + kPasskeyAnswerTokens > o.config.max_context) {
      return absl::InvalidArgumentError(absl::StrCat("eval length ", len, " is outside [", shortest, ", ",
                                                     o.config.max_context - kPasskeyAnswerTokens,
                                                     "] (the shortest prompt, max_context)"));
    }
  }
  if (!(o.lr > 0) || !(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1) || o.warmup_steps < 0 || !(o.clip_norm > 0) ||
      !(o.weight_decay >= 0) || !(o.lm_weight >= 0) || !(o.aux_weight >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "need lr > 0 (%g), min_lr_ratio in [0, 1] (%g), warmup_steps >= 0 (%d), clip_norm > 0 (%g), "
        "weight_decay, lm_weight, aux_weight >= 0 (%g, %g, %g)",
        o.lr, o.min_lr_ratio, o.warmup_steps, o.clip_norm, o.weight_decay, o.lm_weight, o.aux_weight));
  }
  return absl::OkStatus();
}

absl::Status RunTraining(const TrainOptions& options) {
  RETURN_IF_ERROR(ValidateTrainOptions(options));
  try {
    return TrainLoop(options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  }
}

}  // namespace pdserve
