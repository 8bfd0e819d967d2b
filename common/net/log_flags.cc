#include "common/net/log_flags.h"

#include <cstring>
#include <string>

#include <grpc/support/log.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli/cli_util.h"
#include "common/util/log.h"

ABSL_FLAG(std::string, log_format, "text",
          "Log lines on stderr: text (\"PROGRAM: message\") or json (one object per line: ts, level, component, "
          "msg, request_id, ...).");
ABSL_FLAG(bool, log_requests, true,
          "Print one line per finished request on stderr (the router's and each worker's).");

namespace pdserve {
namespace {

// gRPC's lines (gpr_log) as the process's own, with where they came from.
void GrpcLogToPdserveLog(gpr_log_func_args* args) {
  const log::Level level = args->severity == GPR_LOG_SEVERITY_ERROR ? log::Level::kError
                           : args->severity == GPR_LOG_SEVERITY_INFO ? log::Level::kInfo
                                                                      : log::Level::kDebug;
  const char* file = args->file == nullptr ? "" : args->file;
  if (const char* slash = std::strrchr(file, '/'); slash != nullptr) file = slash + 1;
  log::Log(level, args->message == nullptr ? "" : args->message,
           {{"source", "grpc"}, {"file", absl::StrCat(file, ":", args->line)}});
}

}  // namespace

void InitServerLogging(const char* component) {
  absl::StatusOr<log::Format> format = log::ParseFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) Die(format.status(), 2);
  log::Configure(*format, component);
  log::SetRequestLines(absl::GetFlag(FLAGS_log_requests));
  if (*format == log::Format::kJson) gpr_set_log_function(GrpcLogToPdserveLog);
}

}  // namespace pdserve
