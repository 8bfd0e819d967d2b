// The servers' log lines on stderr, in one of two formats (spdlog underneath):
//
//   text  what pdserve always printed: "PROGRAM: message", with "warning: "
//         or "error: " after the prefix for those levels; a line may name
//         its own subject instead of the program (text_prefix below);
//         structured fields are not shown (the message carries the text).
//   json  one object per line: ts (RFC 3339, UTC, milliseconds), level
//         (debug|info|warning|error), component (router, prefill, decode,
//         local, ...), msg, then the line's fields (request_id, ...).
//
// Contents:
//   Level, Format, ParseFormat   the levels and formats
//   Field, Fields                structured fields (string, integer, double, bool)
//   Configure, CurrentFormat     the process's format, program and component
//   SetRequestLines, RequestLines  whether request lines are written
//   Log, Info, Warn, Error       write one line (thread-safe)
//   Millis                       a duration field's value
//   FormatJsonLine, FormatTextLine  the pure formatters (for tests)
// Without Configure a process logs text under the program name InitCli
// set (SetProgram), so clients and early errors look as they always did.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve::log {

enum class Level { kDebug, kInfo, kWarning, kError };
enum class Format { kText, kJson };

// "text" or "json"; InvalidArgument otherwise.
absl::StatusOr<Format> ParseFormat(absl::string_view text);
absl::string_view FormatName(Format format);
absl::string_view LevelName(Level level);

// One structured field of a JSON line. Strings are escaped on output, so
// client-chosen text cannot forge a line or a field.
class Field {
 public:
  using Value = std::variant<std::string, int64_t, double, bool>;
  Field(std::string key, absl::string_view value) : key_(std::move(key)), value_(std::string(value)) {}
  Field(std::string key, const char* value) : key_(std::move(key)), value_(std::string(value)) {}
  Field(std::string key, const std::string& value) : key_(std::move(key)), value_(value) {}
  Field(std::string key, bool value) : key_(std::move(key)), value_(value) {}
  Field(std::string key, double value) : key_(std::move(key)), value_(value) {}
  Field(std::string key, int value) : key_(std::move(key)), value_(static_cast<int64_t>(value)) {}
  Field(std::string key, long value) : key_(std::move(key)), value_(static_cast<int64_t>(value)) {}
  Field(std::string key, long long value) : key_(std::move(key)), value_(static_cast<int64_t>(value)) {}
  Field(std::string key, unsigned value) : key_(std::move(key)), value_(static_cast<int64_t>(value)) {}
  Field(std::string key, unsigned long value) : key_(std::move(key)), value_(static_cast<int64_t>(value)) {}
  const std::string& key() const { return key_; }
  const Value& value() const { return value_; }

 private:
  std::string key_;
  Value value_;
};
using Fields = std::vector<Field>;

// The program name of text lines (InitCli sets it from argv[0]).
void SetProgram(std::string program);
// The process's format and component ("router", "prefill", ...); call once
// at startup, before other threads log.
void Configure(Format format, std::string component);
Format CurrentFormat();
// Whether the servers write one line per request (--log-requests; on by
// default).
void SetRequestLines(bool on);
bool RequestLines();

// Where a text line's prefix comes from: the program (default), none (the
// message names its own subject, e.g. "kv hand-off to ...: ..."), or the
// given name ("pdserve" for the engine's lines, shared with the clients).
struct TextPrefix {
  enum Kind { kProgram, kNone, kName } kind = kProgram;
  absl::string_view name;
  static TextPrefix None() { return {kNone, {}}; }
  static TextPrefix Named(absl::string_view n) { return {kName, n}; }
};

// Writes one line on stderr (flushed), in the configured format.
void Log(Level level, absl::string_view msg, const Fields& fields = {}, TextPrefix prefix = {});
inline void Info(absl::string_view msg, const Fields& fields = {}, TextPrefix prefix = {}) {
  Log(Level::kInfo, msg, fields, prefix);
}
inline void Warn(absl::string_view msg, const Fields& fields = {}, TextPrefix prefix = {}) {
  Log(Level::kWarning, msg, fields, prefix);
}
inline void Error(absl::string_view msg, const Fields& fields = {}, TextPrefix prefix = {}) {
  Log(Level::kError, msg, fields, prefix);
}

// Nanoseconds as milliseconds rounded to the microsecond (JSON fields).
double Millis(int64_t ns);

// The formatters, without the trailing newline. Keys of `fields` that
// collide with ts, level, component or msg are written as "field_<key>".
std::string FormatJsonLine(absl::Time ts, Level level, absl::string_view component, absl::string_view msg,
                           const Fields& fields);
std::string FormatTextLine(absl::string_view prefix, Level level, absl::string_view msg);

}  // namespace pdserve::log
