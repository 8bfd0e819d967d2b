// pdserve-model-info: parameter counts and KV bytes of a model config.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/cli/cli_util.h"
#include "common/model/config.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, config, "", "Model config JSON (or a checkpoint directory holding config.json).");

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "Prints a model's parameter counts and KV-cache bytes as JSON.\n"
                   "Usage: pdserve-model-info --config configs/gpt-oss-lite-502m.json");
  std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) pdserve::Die("--config is required", 2);
  if (path.size() < 5 || path.substr(path.size() - 5) != ".json") path += "/config.json";
  auto config = pdserve::LoadModelConfig(path);
  if (!config.ok()) pdserve::Die(config.status());
  const pdserve::ModelConfig& c = *config;
  const int64_t bf16_row = c.KvBytesPerTokenPerLayer(2);
  nlohmann::json j = {
      {"name", c.name},
      {"total_params", c.TotalParams()},
      {"active_params", c.ActiveParams()},
      // Every layer's K+V for one token in bf16, as an all-global cache stores it.
      {"kv_bytes_per_token", bf16_row * c.n_layers},
      // The mixed cache grows only on global layers; rings are fixed.
      {"kv_bytes_per_token_mixed", bf16_row * c.NumGlobalLayers()},
      {"kv_ring_bytes", bf16_row * c.NumWindowedLayers() * c.window},
      {"kv_bytes_per_token_per_layer", bf16_row},
      {"kv_dtype", "bf16"},
      {"windowed_layers", c.NumWindowedLayers()},
      {"global_layers", c.NumGlobalLayers()},
  };
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
