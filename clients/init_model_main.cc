// pdserve-init-model: writes a checkpoint directory with random weights.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "clients/cli_util.h"
#include "common/model/checkpoint.h"
#include "common/model/config.h"

ABSL_FLAG(std::string, config, "", "Model config JSON.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the random weights.");
ABSL_FLAG(std::string, out, "", "Output directory (created): config.json + model.safetensors.");
ABSL_FLAG(std::string, dtype, "F32", "Stored dtype: F32, BF16 or F16.");

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
  return 0;
}
