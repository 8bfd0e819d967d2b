// pdserve-generate: the single-process reference. Loads a checkpoint,
// generates, prints {"token_ids": [...]} on stdout.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "clients/cli_util.h"
#include "common/engine/engine.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "Checkpoint directory (config.json + model.safetensors).");
ABSL_FLAG(std::string, prompt_ids, "", "Prompt token ids, comma-separated: 1,2,3.");
ABSL_FLAG(int64_t, max_new_tokens, 16, "Tokens to generate (>= 1).");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; <= 0 is greedy.");
ABSL_FLAG(float, top_p, 1.0f, "Nucleus mass in (0, 1]; 0 or >= 1 keeps all.");
ABSL_FLAG(int64_t, top_k, 0, "Keep the k most likely tokens; 0 keeps all.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed (counter-based: u(seed, n)).");
ABSL_FLAG(bool, no_cache, false, "Reference path: replay the whole prefix every step.");
ABSL_FLAG(int64_t, prefill_chunk, 512, "Prefill chunk size in tokens.");
ABSL_FLAG(std::string, weights_dtype, "f32", "Matmul weights in memory: f32 or bf16.");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache storage: f32 or bf16.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past eos_token_id.");
ABSL_FLAG(int, threads, 0, "Intra-op threads; 0 = all cores.");

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "Generates tokens in one process and prints {\"token_ids\": [...]}.\n"
                   "Usage: pdserve-generate --model DIR --prompt-ids 1,2,3 --max-new-tokens N\n"
                   "       [--temperature T --top-p P --top-k K --seed S] [--no-cache]");
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) pdserve::Die("--model is required", 2);
  auto prompt = pdserve::ParseIdList(absl::GetFlag(FLAGS_prompt_ids));
  if (!prompt.ok()) pdserve::Die("--prompt-ids: " + std::string(prompt.status().message()), 2);
  if (prompt->empty()) pdserve::Die("--prompt-ids needs at least one id", 2);

  pdserve::EngineOptions eo;
  auto wd = pdserve::ParseWeightsDtype(absl::GetFlag(FLAGS_weights_dtype));
  if (!wd.ok()) pdserve::Die("--weights-dtype: " + std::string(wd.status().message()), 2);
  auto kd = pdserve::ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kd.ok()) pdserve::Die("--kv-dtype: " + std::string(kd.status().message()), 2);
  eo.weights_dtype = *wd;
  eo.kv.dtype = *kd;
  eo.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  eo.num_threads = absl::GetFlag(FLAGS_threads);
  if (eo.prefill_chunk < 1) pdserve::Die("--prefill-chunk must be >= 1", 2);

  auto engine = pdserve::Engine::Load(model, eo);
  if (!engine.ok()) pdserve::Die(engine.status());

  pdserve::GenerateRequest req;
  req.prompt = *prompt;
  req.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  req.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  req.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  req.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  req.sampling.seed = absl::GetFlag(FLAGS_seed);
  req.use_cache = !absl::GetFlag(FLAGS_no_cache);
  req.stop_at_eos = !absl::GetFlag(FLAGS_ignore_eos);
  if (req.sampling.top_p < 0 || req.sampling.top_p > 1) pdserve::Die("--top-p must be in [0, 1]", 2);
  if (req.sampling.top_k < 0) pdserve::Die("--top-k must be >= 0", 2);

  const auto t0 = std::chrono::steady_clock::now();
  auto out = (*engine)->Generate(req);
  if (!out.ok()) pdserve::Die(out.status());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", nlohmann::json{{"token_ids", *out}}.dump().c_str());
  std::fprintf(stderr, "generated %zu tokens from a %zu-token prompt in %.3f s (%s)\n", out->size(),
               prompt->size(), s, req.use_cache ? "cached" : "no cache");
  return 0;
}
