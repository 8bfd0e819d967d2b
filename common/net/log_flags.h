// --log-format text|json (also PDSERVE_LOG_FORMAT) and --log-requests,
// defined once for every server binary (pdserve-router, -prefill, -decode,
// -local), and the servers' log set-up. The formats are common/util/log.h's.
#pragma once

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(bool, log_requests);  // the router's RouterOptions read it too

namespace pdserve {

// After InitCli: reads --log-format and configures the process's log lines
// under `component` ("router", "prefill", "decode", "local"). In json, gRPC's
// own log lines go through the same logger (one JSON object per line on
// stderr). Sets log::SetRequestLines from --log-requests. Exits 2 with a clear line on a value other than text or json.
void InitServerLogging(const char* component);

}  // namespace pdserve
