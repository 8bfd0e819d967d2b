#include "common/cli/cli_util.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <algorithm>
#include <map>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/util/log.h"

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "unknown"
#endif
#ifndef PDSERVE_GIT_COMMIT
#define PDSERVE_GIT_COMMIT "unknown"
#endif
#ifndef PDSERVE_SOURCE_PREFIX
#define PDSERVE_SOURCE_PREFIX ""
#endif

namespace pdserve {
namespace {
std::string g_program = "pdserve";

// A flag of pdserve's own (a tool's main.cc or *_main.cc, or a shared
// *_flags.cc), not abseil's or gRPC's. `file` is normalized (see below).
bool OwnFlagFile(absl::string_view file) { return absl::EndsWith(file, "main.cc") || absl::EndsWith(file, "_flags.cc"); }

// The environment variable that sets a flag: PDSERVE_ + its name in capitals.
std::string EnvName(absl::string_view flag) { return absl::StrCat("PDSERVE_", absl::AsciiStrToUpper(flag)); }

// Flags of the tool, by file then name.
std::map<std::string, std::vector<absl::CommandLineFlag*>> OwnFlags() {
  std::map<std::string, std::vector<absl::CommandLineFlag*>> by_file;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (OwnFlagFile(flag->Filename())) by_file[flag->Filename()].push_back(flag);
  }
  for (auto& [file, flags] : by_file) {
    std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  }
  return by_file;
}

void PrintHelp(const char* usage) {
  std::cout << g_program << ": " << usage << "\n\n"
            << "Every flag may also be set by the environment variable PDSERVE_<NAME> (e.g. --kv-budget-mb:\n"
            << "PDSERVE_KV_BUDGET_MB); the command line wins. --version prints the version and git commit.\n";
  for (const auto& [file, flags] : OwnFlags()) {
    std::cout << "\n  Flags from " << file << ":\n";
    for (const absl::CommandLineFlag* f : flags) {
      std::cout << "    --" << f->Name() << " (" << f->Help() << "); default: \"" << f->DefaultValue() << "\";\n";
    }
  }
}

// PDSERVE_<FLAG> for each of the tool's flags; parsed before the command
// line, which then overrides.
void ApplyEnvironment() {
  for (const auto& [file, flags] : OwnFlags()) {
    for (absl::CommandLineFlag* f : flags) {
      const std::string env = EnvName(f->Name());
      const char* value = std::getenv(env.c_str());
      if (value == nullptr) continue;
      std::string error;
      if (!f->ParseFrom(value, &error)) {
        Die(absl::StrCat(env, "='", absl::string_view(value).substr(0, 80), "': ", error), 2);
      }
    }
  }
}

}  // namespace

void InitCli(int argc, char** argv, const char* usage) {
  std::string prog = argv[0];
  if (auto slash = prog.rfind('/'); slash != std::string::npos) prog = prog.substr(slash + 1);
  g_program = prog;
  log::SetProgram(prog);
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig usage_config;
  // --help lists the flags defined in the tool's own main.cc (servers) or
  // *_main.cc (clients) and the shared *_flags.cc, not abseil's or gRPC's,
  // by their path in the repository (not the build machine's).
  usage_config.contains_help_flags = [](absl::string_view file) { return OwnFlagFile(file); };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  usage_config.normalize_filename = [](absl::string_view file) {
    absl::ConsumePrefix(&file, PDSERVE_SOURCE_PREFIX);
    // A compiler launcher that rewrites absolute paths (ccache's base_dir)
    // leaves them relative to the build directory.
    while (absl::ConsumePrefix(&file, "../") || absl::ConsumePrefix(&file, "./")) {
    }
    return std::string(file);
  };
  usage_config.version_string = [] {
    return absl::StrCat(g_program, " ", PDSERVE_VERSION, " (git ", PDSERVE_GIT_COMMIT, ")\n");
  };
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
      PrintHelp(usage);  // abseil's --help exits 1; a help request is a success
      std::exit(0);
    }
    if (a == "--version") {
      std::cout << usage_config.version_string();
      std::exit(0);
    }
    normalized.push_back(a);
  }
  ApplyEnvironment();
  for (std::string& a : normalized) args.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(argc, args.data());
  if (rest.size() > 1) Die(absl::StrCat("unexpected argument '", rest[1], "' (flags look like --name=value)"), 2);
}

void Die(const std::string& message, int code) {
  log::Error(message);  // "NAME: error: MESSAGE" in text (InitCli set NAME)
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
