// What every pdserve binary (servers, clients, benchmarks, the trainer)
// shares on the command line: flag parsing with a usage line, PDSERVE_<FLAG>
// environment variables, --help and --version, and failing with one clear
// line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

// Sets the usage message, parses abseil flags, and rejects positional
// arguments. Exits 2 with one line on a bad flag.
void InitCli(int argc, char** argv, const char* usage);

// Logs MESSAGE as an error ("NAME: error: MESSAGE" in text; a JSON line
// under --log-format json) and exits with `code`.
[[noreturn]] void Die(const std::string& message, int code = 1);
[[noreturn]] void Die(const absl::Status& status, int code = 1);

// Parses "1,2,3" into ids. InvalidArgument names the bad item.
absl::StatusOr<std::vector<int64_t>> ParseIdList(const std::string& text);

}  // namespace pdserve
