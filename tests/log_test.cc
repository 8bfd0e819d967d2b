// common/util/log: the JSON and text formatters, the configured logger on
// stderr, and common/net/request_tags' traceparent check.
#include "common/util/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/time/civil_time.h"
#include "common/net/request_tags.h"

namespace pdserve {
namespace {

absl::Time At(int ms) {
  return absl::FromCivil(absl::CivilSecond(2026, 3, 4, 5, 6, 7), absl::UTCTimeZone()) + absl::Milliseconds(ms);
}

TEST(LogFormat, ParsesTextAndJsonOnly) {
  EXPECT_EQ(*log::ParseFormat("text"), log::Format::kText);
  EXPECT_EQ(*log::ParseFormat("json"), log::Format::kJson);
  for (const char* bad : {"", "JSON", "xml", "json "}) {
    absl::StatusOr<log::Format> f = log::ParseFormat(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(f.status()));
    EXPECT_NE(f.status().message().find("text or json"), absl::string_view::npos) << f.status();
  }
}

TEST(LogJson, HasTheKeysInOrderThenTheFields) {
  const std::string line = log::FormatJsonLine(At(45), log::Level::kInfo, "router", "request",
                                               {{"request_id", "cmpl-1"},
                                                {"prompt_tokens", 12},
                                                {"ttft_ms", 1.5},
                                                {"local", false},
                                                {"bytes", uint64_t{1} << 40}});
  EXPECT_EQ(line,
            R"({"ts":"2026-03-04T05:06:07.045Z","level":"info","component":"router","msg":"request",)"
            R"("request_id":"cmpl-1","prompt_tokens":12,"ttft_ms":1.5,"local":false,"bytes":1099511627776})");
}

TEST(LogJson, LevelsAndMilliseconds) {
  const std::pair<log::Level, const char*> levels[] = {{log::Level::kDebug, "debug"},
                                                       {log::Level::kInfo, "info"},
                                                       {log::Level::kWarning, "warning"},
                                                       {log::Level::kError, "error"}};
  for (const auto& [level, name] : levels) {
    nlohmann::json j = nlohmann::json::parse(log::FormatJsonLine(At(0), level, "c", "m", {}));
    EXPECT_EQ(j["level"], name);
    EXPECT_EQ(j["ts"], "2026-03-04T05:06:07.000Z");
  }
  EXPECT_EQ(log::Millis(1234567), 1.235);
  EXPECT_EQ(log::Millis(0), 0.0);
}

// Client text (a request id, an error quoting it) cannot break the line,
// forge a key or make the formatter throw.
TEST(LogJson, EscapesEverythingClientChosen) {
  const std::string evil = "x\"}\n{\"level\":\"error\",\"msg\":\"forged\\\t\x01\x7f";
  const std::string line = log::FormatJsonLine(At(1), log::Level::kInfo, "router", evil, {{"request_id", evil}});
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(line.find('\x01'), std::string::npos) << line;
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["msg"], evil);
  EXPECT_EQ(j["request_id"], evil);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j.size(), 5u);
}

TEST(LogJson, InvalidUtf8IsReplacedNotThrown) {
  std::string line;
  ASSERT_NO_THROW(line = log::FormatJsonLine(At(2), log::Level::kWarning, "decode", "bad \xff\xfe end",
                                             {{"request_id", std::string("\xc3")}}));
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["msg"], "bad \xEF\xBF\xBD\xEF\xBF\xBD end");  // U+FFFD twice
  EXPECT_EQ(j["request_id"], "\xEF\xBF\xBD");
}

TEST(LogJson, FieldsCannotOverrideTheFixedKeys) {
  nlohmann::json j = nlohmann::json::parse(log::FormatJsonLine(At(3), log::Level::kInfo, "prefill", "real",
                                                               {{"msg", "fake"}, {"level", "error"}, {"ts", 1},
                                                                {"component", "x"}}));
  EXPECT_EQ(j["msg"], "real");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "prefill");
  EXPECT_EQ(j["field_msg"], "fake");
  EXPECT_EQ(j["field_level"], "error");
  EXPECT_EQ(j["field_ts"], 1);
  EXPECT_EQ(j["field_component"], "x");
}

TEST(LogText, KeepsTheProgramPrefixAndLevelTags) {
  EXPECT_EQ(log::FormatTextLine("pdserve-router", log::Level::kInfo, "serving on port 1"),
            "pdserve-router: serving on port 1");
  EXPECT_EQ(log::FormatTextLine("pdserve-router", log::Level::kWarning, "no tokenizer"),
            "pdserve-router: warning: no tokenizer");
  EXPECT_EQ(log::FormatTextLine("pdserve-decode", log::Level::kError, "boom"), "pdserve-decode: error: boom");
  EXPECT_EQ(log::FormatTextLine("", log::Level::kWarning, "kv hand-off: x"), "kv hand-off: x");
}

// The configured logger, end to end on stderr (restores the text default).
TEST(LogLogger, WritesTheConfiguredFormatOnStderr) {
  log::SetProgram("log_test");
  testing::internal::CaptureStderr();
  log::Info("plain", {{"request_id", "a"}});
  log::Warn("careful", {}, log::TextPrefix::Named("pdserve"));
  log::Info("bare line", {}, log::TextPrefix::None());
  log::Log(log::Level::kDebug, "not shown");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "log_test: plain\npdserve: warning: careful\nbare line\n");

  log::Configure(log::Format::kJson, "router");
  EXPECT_EQ(log::CurrentFormat(), log::Format::kJson);
  testing::internal::CaptureStderr();
  log::Error("failed", {{"request_id", "cmpl-9"}, {"status", "UNAVAILABLE"}}, log::TextPrefix::None());
  const std::string out = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "router");
  EXPECT_EQ(j["msg"], "failed");
  EXPECT_EQ(j["request_id"], "cmpl-9");
  EXPECT_EQ(j["status"], "UNAVAILABLE");
  log::Configure(log::Format::kText, "pdserve");
}

TEST(Traceparent, AcceptsW3cAndRejectsTheRest) {
  EXPECT_TRUE(ValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_TRUE(ValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
  // A later version may append fields.
  EXPECT_TRUE(ValidTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"));
  for (const char* bad : {"", "00-zz-nothex-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                          "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"}) {
    EXPECT_FALSE(ValidTraceparent(bad)) << bad;
  }
  EXPECT_FALSE(ValidTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + std::string(250, 'a')));
}

TEST(RequestId, MetadataSafeIdIsPrintableAndBounded) {
  EXPECT_EQ(MetadataSafeId("cmpl-abc"), "cmpl-abc");
  EXPECT_EQ(MetadataSafeId("x\ny"), "x\\ny");
  const std::string safe = MetadataSafeId(std::string(300, '\x01'));
  EXPECT_EQ(safe.size(), 128u * 4);  // "\001" per byte, 128 bytes
  for (char c : safe) EXPECT_TRUE(c >= 0x20 && c < 0x7f);
}

}  // namespace
}  // namespace pdserve
