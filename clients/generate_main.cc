// pdserve-generate: the single-process reference. Loads a checkpoint,
// generates, prints {"token_ids": [...]} on stdout; with --prompts-jsonl,
// one line out per prompt line in, from one loaded model. The engine flags
// (--model, --weights-dtype, ...) are common/engine/engine_flags.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/engine/engine_flags.h"
#include "common/util/omp_env.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, prompt_ids, "", "Prompt token ids, comma-separated: 1,2,3.");
ABSL_FLAG(std::string, prompts_jsonl, "",
          "Instead of --prompt-ids: a file with one JSON object per line, {\"token_ids\": [...]} plus any other "
          "fields (an \"id\"), each answered by one line {<the other fields>, \"token_ids\": [generated]}.");
ABSL_FLAG(int64_t, max_new_tokens, 16, "Tokens to generate (>= 1).");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; <= 0 is greedy.");
ABSL_FLAG(float, top_p, 1.0f, "Nucleus mass in (0, 1]; 0 or >= 1 keeps all.");
ABSL_FLAG(int64_t, top_k, 0, "Keep the k most likely tokens; 0 keeps all.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed (counter-based: u(seed, n)).");
ABSL_FLAG(bool, no_cache, false, "Reference path: replay the whole prefix every step.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past eos_token_id.");

namespace {

// --prompts-jsonl: every line's token_ids through `base`'s settings, in order.
int RunJsonl(const pdserve::Engine& engine, pdserve::GenerateRequest base, const std::string& path) {
  std::ifstream in(path);
  if (!in) pdserve::Die("--prompts-jsonl: cannot read '" + path + "'", 2);
  std::string line;
  int64_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("token_ids") || !j["token_ids"].is_array() || j["token_ids"].empty()) {
      pdserve::Die(path + " line " + std::to_string(n) + ": not an object with a non-empty \"token_ids\" array", 2);
    }
    pdserve::GenerateRequest req = base;
    req.prompt.clear();
    for (const nlohmann::json& id : j["token_ids"]) {
      if (!id.is_number_integer()) pdserve::Die(path + " line " + std::to_string(n) + ": a token id is not an integer", 2);
      req.prompt.push_back(id.get<int64_t>());
    }
    auto out = engine.Generate(req);
    if (!out.ok()) pdserve::Die(absl::Status(out.status().code(), path + " line " + std::to_string(n) + ": " +
                                                                      std::string(out.status().message())));
    j["token_ids"] = *out;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "generated for %ld prompts in %.3f s\n", static_cast<long>(n), s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  pdserve::InitCli(argc, argv,
                   "Generates tokens in one process and prints {\"token_ids\": [...]}.\n"
                   "Usage: pdserve-generate --model DIR (--prompt-ids 1,2,3 | --prompts-jsonl FILE) --max-new-tokens N\n"
                   "       [--temperature T --top-p P --top-k K --seed S] [--no-cache]");
  auto flags = pdserve::EngineFlagsFromCommandLine();
  if (!flags.ok()) pdserve::Die(flags.status(), 2);
  const std::string jsonl = absl::GetFlag(FLAGS_prompts_jsonl);
  auto prompt = pdserve::ParseIdList(absl::GetFlag(FLAGS_prompt_ids));
  if (!prompt.ok()) pdserve::Die("--prompt-ids: " + std::string(prompt.status().message()), 2);
  if (prompt->empty() == jsonl.empty()) pdserve::Die("give exactly one of --prompt-ids and --prompts-jsonl", 2);

  auto engine = pdserve::Engine::Load(flags->model_dir, flags->options);
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

  if (!jsonl.empty()) return RunJsonl(**engine, req, jsonl);

  const auto t0 = std::chrono::steady_clock::now();
  auto out = (*engine)->Generate(req);
  if (!out.ok()) pdserve::Die(out.status());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", nlohmann::json{{"token_ids", *out}}.dump().c_str());
  std::fprintf(stderr, "generated %zu tokens from a %zu-token prompt in %.3f s (%s)\n", out->size(),
               prompt->size(), s, req.use_cache ? "cached" : "no cache");
  return 0;
}
