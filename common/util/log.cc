#include "common/util/log.h"

#include <cmath>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "absl/strings/str_cat.h"

namespace pdserve::log {
namespace {

// The process's settings: written by SetProgram/Configure at startup,
// before other threads log.
struct Settings {
  std::string program = "pdserve";
  std::string component = "pdserve";
  Format format = Format::kText;
  bool request_lines = true;
};
Settings& TheSettings() {
  static Settings* s = new Settings;  // never destroyed: lines may come during exit
  return *s;
}

// What the line being written carries besides spdlog's message: spdlog
// 1.10 has no structured fields, and a synchronous logger formats on the
// calling thread, so Log() hands them over in thread-locals.
struct LineExtras {
  const Fields* fields = nullptr;
  TextPrefix prefix;
};
thread_local LineExtras t_extras;

Level FromSpdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return Level::kDebug;
    case spdlog::level::info: return Level::kInfo;
    case spdlog::level::warn: return Level::kWarning;
    default: return Level::kError;
  }
}

spdlog::level::level_enum ToSpdlog(Level l) {
  switch (l) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarning: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::err;
}

// Formats spdlog's message as a text or JSON line (the configured format).
class LineFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const Settings& s = TheSettings();
    const absl::string_view text(msg.payload.data(), msg.payload.size());
    const Level level = FromSpdlog(msg.level);
    static const Fields kNoFields;
    const Fields& fields = t_extras.fields != nullptr ? *t_extras.fields : kNoFields;
    std::string line;
    if (s.format == Format::kJson) {
      line = FormatJsonLine(absl::FromChrono(msg.time), level, s.component, text, fields);
    } else {
      const TextPrefix& p = t_extras.prefix;
      const absl::string_view prefix = p.kind == TextPrefix::kProgram ? absl::string_view(s.program)
                                      : p.kind == TextPrefix::kName  ? p.name
                                                                     : absl::string_view();
      line = FormatTextLine(prefix, level, text);
    }
    line.push_back('\n');
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<LineFormatter>(); }
};

spdlog::logger& TheLogger() {
  static spdlog::logger* logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();  // flushes each line
    auto* l = new spdlog::logger("pdserve", std::move(sink));       // never destroyed, like Settings
    l->set_formatter(std::make_unique<LineFormatter>());
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *logger;
}

nlohmann::ordered_json ToJson(const Field::Value& v) {
  return std::visit([](const auto& x) { return nlohmann::ordered_json(x); }, v);
}

}  // namespace

absl::StatusOr<Format> ParseFormat(absl::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-format must be text or json, not '", text.substr(0, 40), "'"));
}

absl::string_view FormatName(Format format) { return format == Format::kJson ? "json" : "text"; }

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarning: return "warning";
    case Level::kError: return "error";
  }
  return "error";
}

void SetProgram(std::string program) { TheSettings().program = std::move(program); }

void Configure(Format format, std::string component) {
  TheSettings().format = format;
  TheSettings().component = std::move(component);
}

Format CurrentFormat() { return TheSettings().format; }

void SetRequestLines(bool on) { TheSettings().request_lines = on; }
bool RequestLines() { return TheSettings().request_lines; }

void Log(Level level, absl::string_view msg, const Fields& fields, TextPrefix prefix) {
  spdlog::logger& logger = TheLogger();
  if (!logger.should_log(ToSpdlog(level))) return;
  t_extras = {&fields, prefix};
  logger.log(ToSpdlog(level), spdlog::string_view_t(msg.data(), msg.size()));
  t_extras = {};
}

double Millis(int64_t ns) { return std::round(static_cast<double>(ns) / 1e3) / 1e3; }

std::string FormatJsonLine(absl::Time ts, Level level, absl::string_view component, absl::string_view msg,
                           const Fields& fields) {
  nlohmann::ordered_json line;
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", ts, absl::UTCTimeZone());
  line["level"] = LevelName(level);
  line["component"] = std::string(component);
  line["msg"] = std::string(msg);
  for (const Field& f : fields) {
    const bool reserved = f.key() == "ts" || f.key() == "level" || f.key() == "component" || f.key() == "msg";
    line[reserved ? absl::StrCat("field_", f.key()) : f.key()] = ToJson(f.value());
  }
  // Invalid UTF-8 (client text) is replaced, never an exception.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FormatTextLine(absl::string_view prefix, Level level, absl::string_view msg) {
  if (prefix.empty()) return std::string(msg);
  const char* tag = level == Level::kWarning ? "warning: " : level == Level::kError ? "error: " : "";
  return absl::StrCat(prefix, ": ", tag, msg);
}

}  // namespace pdserve::log
