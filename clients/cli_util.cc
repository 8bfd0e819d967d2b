#include "clients/cli_util.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <algorithm>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pdserve {
namespace {
std::string g_program = "pdserve";
}

void InitCli(int argc, char** argv, const char* usage) {
  std::string prog = argv[0];
  if (auto slash = prog.rfind('/'); slash != std::string::npos) prog = prog.substr(slash + 1);
  g_program = prog;
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig usage_config;
  // --help lists the flags defined in the tool's own main.cc (servers) or
  // *_main.cc (clients) and the shared *_flags.cc, not abseil's or gRPC's.
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc") || absl::EndsWith(file, "_flags.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  // The documented spelling is --max-new-tokens; abseil names are
  // identifiers, so map '-' to '_' inside flag names (never in values).
  static std::vector<std::string> normalized;
  static std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t eq = std::min(a.find('='), a.size());
      for (size_t c = 2; c < eq; ++c) {
        if (a[c] == '-') a[c] = '_';
      }
    }
    if (a == "--help" || a == "-h") {
      // abseil exits 1 after --help; a help request is a success.
      absl::flags_internal::SetFlagsHelpMode(absl::flags_internal::HelpMode::kImportant);
      absl::flags_internal::HandleUsageFlags(std::cout, usage);
      std::exit(0);
    }
    normalized.push_back(a);
  }
  for (std::string& a : normalized) args.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(argc, args.data());
  if (rest.size() > 1) Die(absl::StrCat("unexpected argument '", rest[1], "' (flags look like --name=value)"), 2);
}

void Die(const std::string& message, int code) {
  std::fprintf(stderr, "%s: error: %s\n", g_program.c_str(), message.c_str());
  std::exit(code);
}

void Die(const absl::Status& status, int code) { Die(std::string(status.message()), code); }

absl::StatusOr<std::vector<int64_t>> ParseIdList(const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &id) || id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a token id (a non-negative integer)"));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace pdserve
