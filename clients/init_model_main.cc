// pdserve-init-model: writes a checkpoint directory with random weights.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "common/cli/cli_util.h"
#include "common/model/checkpoint.h"
#include "common/model/config.h"

ABSL_FLAG(std::string, config, "", "Model config JSON.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the random weights.");
ABSL_FLAG(std::string, out, "", "Output directory (created): config.json + model.safetensors.");
ABSL_FLAG(std::string, dtype, "F32", "Stored dtype: F32, BF16 or F16.");
ABSL_FLAG(std::string, tokenizer_json, "",
          "For a BPE config: the tokenizer.json to copy into DIR (default: $PDSERVE_LLAMA3_TOKENIZER_JSON, else "
          "the first of .cache/tokenizers/llama3/tokenizer.json (as fetched by scripts/fetch_tokenizer.sh) and "
          "share/pdserve/tokenizers/llama3/tokenizer.json found in a folder above this binary, wherever it is "
          "run from).");

namespace {

// Where the default tokenizer lives, relative to the source tree (a build
// folder inside it runs the binary) or to an install prefix (PREFIX/bin).
constexpr const char* kTokenizerPaths[] = {".cache/tokenizers/llama3/tokenizer.json",
                                           "share/pdserve/tokenizers/llama3/tokenizer.json"};

// The tokenizer.json to copy for a BPE config: --tokenizer_json, else
// $PDSERVE_LLAMA3_TOKENIZER_JSON, else the first kTokenizerPaths entry that
// exists under a folder above the binary (/proc/self/exe, so the working
// directory does not matter). "" when there is none.
std::string DefaultTokenizerJson() {
  std::string src = absl::GetFlag(FLAGS_tokenizer_json);
  if (!src.empty()) return src;
  if (const char* env = std::getenv("PDSERVE_LLAMA3_TOKENIZER_JSON"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (std::filesystem::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    for (const char* rel : kTokenizerPaths) {
      if (std::filesystem::is_regular_file(dir / rel, ec)) return (dir / rel).string();
    }
    if (dir == dir.root_path()) break;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "Writes a GPT-OSS-Lite checkpoint with random weights.\n"
                   "Usage: pdserve-init-model --config C.json --seed S --out DIR [--dtype F32|BF16|F16]");
  const std::string config_path = absl::GetFlag(FLAGS_config), out = absl::GetFlag(FLAGS_out);
  if (config_path.empty()) pdserve::Die("--config is required", 2);
  if (out.empty()) pdserve::Die("--out is required", 2);
  const std::string dt = absl::GetFlag(FLAGS_dtype);
  pdserve::StDtype dtype = dt == "F32"    ? pdserve::StDtype::kF32
                           : dt == "BF16" ? pdserve::StDtype::kBF16
                           : dt == "F16"  ? pdserve::StDtype::kF16
                                          : pdserve::StDtype::kOther;
  if (dtype == pdserve::StDtype::kOther) pdserve::Die("--dtype must be F32, BF16 or F16, got '" + dt + "'", 2);
  auto config = pdserve::LoadModelConfig(config_path);
  if (!config.ok()) pdserve::Die(config.status());
  pdserve::ModelWeights w = pdserve::RandomWeights(*config, absl::GetFlag(FLAGS_seed));
  if (auto st = pdserve::SaveCheckpoint(w, out, dtype); !st.ok()) pdserve::Die(st);
  std::fprintf(stderr, "wrote %s (%lld parameters, %s)\n", out.c_str(),
               static_cast<long long>(config->TotalParams()), dt.c_str());
  if (config->tokenizer == pdserve::TokenizerType::kBpe) {
    // The tokenizer travels with the checkpoint, as on the Hub.
    const std::string src = DefaultTokenizerJson();
    const std::filesystem::path dst = std::filesystem::path(out) / config->tokenizer_file;
    std::error_code ec;
    if (src.empty()) {
      std::fprintf(stderr,
                   "warning: no %s copied: no --tokenizer-json, no $PDSERVE_LLAMA3_TOKENIZER_JSON, and no %s or %s "
                   "in a folder above this binary; run scripts/fetch_tokenizer.sh or pass --tokenizer-json. "
                   "Without it the router serves token-id prompts only.\n",
                   config->tokenizer_file.c_str(), kTokenizerPaths[0], kTokenizerPaths[1]);
    } else if (std::filesystem::copy_file(src, dst, std::filesystem::copy_options::overwrite_existing, ec)) {
      std::fprintf(stderr, "copied %s to %s\n", src.c_str(), dst.c_str());
    } else {
      std::fprintf(stderr,
                   "warning: no %s copied (%s: %s); run scripts/fetch_tokenizer.sh or pass --tokenizer-json. "
                   "Without it the router serves token-id prompts only.\n",
                   config->tokenizer_file.c_str(), src.c_str(), ec.message().c_str());
    }
  }
  return 0;
}
