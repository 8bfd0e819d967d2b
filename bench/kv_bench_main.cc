// pdserve-kv-bench: stored KV bytes of the MixedKVCache (windowed rings +
// growing global layers) versus an all-global cache, analytically and
// measured from real cache objects filled with zeros.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/cache_layout.h"
#include "common/model/config.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, config, "configs/gpt-oss-lite-502m.json", "Model config JSON.");
ABSL_FLAG(std::string, kv_dtype, "bf16", "KV cache storage: f32 or bf16.");
ABSL_FLAG(std::string, tokens, "4096,8192,16384,32768,65536,131072", "Sequence lengths T, comma-separated.");
ABSL_FLAG(int64_t, chunk, 4096, "Rows per Append call when filling a cache.");
ABSL_FLAG(bool, measure, true, "Also fill real MixedKVCache objects (false: analytical only).");
ABSL_FLAG(bool, measure_all_global, true,
          "Also measure an all-global cache (a copy of the config with window = T, so every layer keeps "
          "all T rows).");
ABSL_FLAG(std::string, json_out, "", "Write the table as JSON to this file.");

namespace {

struct Measured {
  int64_t used = 0, allocated = 0;
  double fill_s = 0;
};

// Fills a fresh cache with T zero rows per layer, `chunk` rows per Append.
Measured Fill(const pdserve::ModelConfig& config, const pdserve::KvCacheOptions& opts, int64_t T, int64_t chunk) {
  const auto t0 = std::chrono::steady_clock::now();
  const at::ScalarType st = opts.dtype == pdserve::KvDtype::kBF16 ? at::kBFloat16 : at::kFloat;
  const at::Tensor zeros = at::zeros({std::min(chunk, T), config.n_kv_heads, config.head_dim}, st);
  Measured m;
  {
    pdserve::MixedKVCache cache(pdserve::CacheLayout(config), opts);
    for (int64_t l = 0; l < config.n_layers; ++l) {
      for (int64_t done = 0; done < T;) {
        const int64_t n = std::min(chunk, T - done);
        const at::Tensor z = n == zeros.size(0) ? zeros : zeros.narrow(0, 0, n);
        absl::Status s = cache.Append(l, z, z);
        if (!s.ok()) pdserve::Die(absl::StrCat("Append(layer ", l, ", T=", T, "): ", s.message()));
        done += n;
      }
      const int64_t want = pdserve::ModelConfig::IsWindowed(l) ? std::min(T, config.window) : T;
      if (cache.seq_len(l) != want) {
        pdserve::Die(absl::StrCat("layer ", l, " holds ", cache.seq_len(l), " rows after T=", T, ", expected ", want));
      }
    }
    m.used = cache.UsedBytes();
    m.allocated = cache.AllocatedBytes();
  }  // the cache is freed here, before the next one
  m.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::string Mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// ---- Options: the flags, checked (bad values exit 2).
struct Options {
  pdserve::ModelConfig config;
  std::string kd;  // --kv-dtype as given
  pdserve::KvCacheOptions cache;
  std::vector<int64_t> tokens;
  int64_t chunk = 0;
  bool measure = false, measure_all_global = false;
  std::string json_out;
};

Options ParseOptions() {
  Options o;
  auto config = pdserve::LoadModelConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) pdserve::Die(config.status());
  o.config = *std::move(config);
  o.kd = absl::GetFlag(FLAGS_kv_dtype);
  auto kv_dtype = pdserve::ParseKvDtype(o.kd);
  if (!kv_dtype.ok()) pdserve::Die("--kv-dtype: " + std::string(kv_dtype.status().message()), 2);
  auto tokens = pdserve::ParseIdList(absl::GetFlag(FLAGS_tokens));
  if (!tokens.ok()) pdserve::Die("--tokens: " + std::string(tokens.status().message()), 2);
  if (tokens->empty()) pdserve::Die("--tokens needs at least one length", 2);
  o.tokens = *std::move(tokens);
  o.chunk = absl::GetFlag(FLAGS_chunk);
  if (o.chunk < 1) pdserve::Die("--chunk must be >= 1", 2);
  o.measure = absl::GetFlag(FLAGS_measure);
  o.measure_all_global = o.measure && absl::GetFlag(FLAGS_measure_all_global);
  o.cache.dtype = *kv_dtype;
  o.json_out = absl::GetFlag(FLAGS_json_out);
  return o;
}

// The cache's shape: bytes of one token's K+V in one layer, and the layer kinds.
struct Layout {
  int64_t elem = 0, row = 0;
  int64_t nw = 0, ng = 0;  // windowed and global layers
};

Layout LayoutOf(const Options& o) {
  const pdserve::ModelConfig& c = o.config;
  Layout l;
  l.elem = o.kd == "bf16" ? 2 : 4;
  l.row = c.KvBytesPerTokenPerLayer(l.elem);  // K+V bytes of one token in one layer
  l.nw = c.NumWindowedLayers();
  l.ng = c.NumGlobalLayers();
  return l;
}

void PrintHeader(const Options& o, const Layout& l) {
  const pdserve::ModelConfig& c = o.config;
  std::printf("config %s: %lld layers (%lld windowed, window %lld; %lld global), K=%lld, d=%lld, kv %s\n",
              c.name.c_str(), static_cast<long long>(c.n_layers), static_cast<long long>(l.nw),
              static_cast<long long>(c.window), static_cast<long long>(l.ng), static_cast<long long>(c.n_kv_heads),
              static_cast<long long>(c.head_dim), o.kd.c_str());
  std::printf("bytes per token per layer (K+V) = 2*K*d*%lld = %lld\n\n", static_cast<long long>(l.elem),
              static_cast<long long>(l.row));
  std::printf("%8s | %14s %14s %7s | %14s %14s %14s | %14s %14s\n", "T", "mixed B", "all-global B", "ratio",
              "meas used B", "meas alloc B", "meas MiB", "all-gl used B", "all-gl alloc B");
}

// One length T: the analytical bytes, and (with --measure) the filled
// caches'. Prints its table row and returns its JSON row; clears *all_match
// when a measurement differs from the analysis.
nlohmann::json MeasureLength(const Options& o, const Layout& l, int64_t T, bool* all_match) {
  const pdserve::ModelConfig& c = o.config;
  if (T < 1) pdserve::Die("--tokens entries must be >= 1", 2);
  const int64_t mixed_rows = l.nw * std::min(T, c.window) + l.ng * T;
  const int64_t global_rows = c.n_layers * T;
  const int64_t mixed_b = mixed_rows * l.row, global_b = global_rows * l.row;
  const double ratio = static_cast<double>(global_b) / static_cast<double>(mixed_b);
  nlohmann::json j{{"T", T},
                   {"mixed_rows", mixed_rows},
                   {"all_global_rows", global_rows},
                   {"mixed_bytes", mixed_b},
                   {"all_global_bytes", global_b},
                   {"ratio", ratio}};
  Measured m, g;
  if (o.measure) {
    pdserve::KvCacheOptions opts = o.cache;
    opts.max_tokens = std::max<int64_t>(opts.max_tokens, T);
    m = Fill(c, opts, T, o.chunk);
    j["measured_used_bytes"] = m.used;
    j["measured_allocated_bytes"] = m.allocated;
    j["measured_fill_s"] = m.fill_s;
    if (m.used != mixed_b) *all_match = false;
    if (o.measure_all_global) {
      pdserve::ModelConfig cg = c;
      cg.window = std::max(cg.window, T);
      cg.max_context = std::max(cg.max_context, T);
      g = Fill(cg, opts, T, o.chunk);
      j["all_global_measured_used_bytes"] = g.used;
      j["all_global_measured_allocated_bytes"] = g.allocated;
      if (g.used != global_b) *all_match = false;
      j["measured_ratio"] = static_cast<double>(g.used) / static_cast<double>(m.used);
    }
  }
  const bool measure = o.measure, measure_all_global = o.measure_all_global;
  std::printf("%8lld | %14lld %14lld %6.2fx | %14s %14s %14s | %14s %14s\n", static_cast<long long>(T),
              static_cast<long long>(mixed_b), static_cast<long long>(global_b), ratio,
              measure ? std::to_string(m.used).c_str() : "-", measure ? std::to_string(m.allocated).c_str() : "-",
              measure ? Mib(m.used).c_str() : "-", measure_all_global ? std::to_string(g.used).c_str() : "-",
              measure_all_global ? std::to_string(g.allocated).c_str() : "-");
  std::fflush(stdout);
  return j;
}

void PrintFooter(const Options& o, const Layout& l, bool all_match) {
  const pdserve::ModelConfig& c = o.config;
  std::printf("\nmixed rows = %lld*min(T,%lld) + %lld*T; all-global rows = %lld*T; bytes = rows * %lld\n",
              static_cast<long long>(l.nw), static_cast<long long>(c.window), static_cast<long long>(l.ng),
              static_cast<long long>(c.n_layers), static_cast<long long>(l.row));
  if (o.measure) {
    std::printf("measured UsedBytes() %s the analytical bytes at every T%s\n", all_match ? "equals" : "DIFFERS FROM",
                o.measure_all_global ? " (both caches)" : "");
    std::printf(
        "AllocatedBytes() - UsedBytes() is the global layers' 1.5x growth slack (and unfilled ring\n"
        "rows when T < window).\n");
  }
}

void WriteJson(const Options& o, const Layout& l, const nlohmann::json& rows) {
  const pdserve::ModelConfig& c = o.config;
  nlohmann::json doc{{"config", c.name},        {"kv_dtype", o.kd},      {"bytes_per_token_per_layer", l.row},
                     {"windowed_layers", l.nw}, {"global_layers", l.ng}, {"window", c.window},
                     {"rows", rows}};
  std::ofstream f(o.json_out, std::ios::trunc);
  f << doc.dump(2) << "\n";
  if (!f) pdserve::Die("cannot write '" + o.json_out + "'");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pdserve::InitCli(argc, argv,
                   "Stored KV bytes: MixedKVCache versus an all-global cache, analytical and measured.\n"
                   "Usage: pdserve-kv-bench [--config configs/gpt-oss-lite-502m.json] [--kv-dtype bf16]\n"
                   "       [--tokens 4096,...,131072] [--json-out FILE]");
  const Options o = ParseOptions();
  const Layout l = LayoutOf(o);
  PrintHeader(o, l);
  nlohmann::json rows = nlohmann::json::array();
  bool all_match = true;
  for (int64_t T : o.tokens) rows.push_back(MeasureLength(o, l, T, &all_match));
  PrintFooter(o, l, all_match);
  if (!o.json_out.empty()) WriteJson(o, l, rows);
  return all_match ? 0 : 1;
}
