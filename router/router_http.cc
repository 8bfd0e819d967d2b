#include "router/router_http.h"

#include <utility>

namespace pdserve {

absl::Status WorkersHealthy(const WorkerPool& prefill, const WorkerPool& decode) {
  if (prefill.Candidates().empty()) return absl::UnavailableError("no healthy prefill worker");
  if (decode.Candidates().empty()) return absl::UnavailableError("no healthy decode worker");
  return absl::OkStatus();
}

OpenAiHttpOptions RouterHttpOptions(std::string program, const ModelConfig* config, const WorkerPool* prefill,
                                    const WorkerPool* decode, const MetricsRegistry* metrics,
                                    SecurityOptions security) {
  OpenAiHttpOptions o;
  o.program = std::move(program);
  o.config = config;
  o.health = [prefill, decode] { return WorkersHealthy(*prefill, *decode); };
  o.metrics = metrics;
  o.security = std::move(security);
  return o;
}

}  // namespace pdserve
