// A FinishReason of the public proto as clients print it.
#pragma once

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

// FINISH_REASON_STOP -> "stop", FINISH_REASON_LENGTH -> "length"; the number
// for a value newer than this client.
inline std::string FinishReasonName(int reason) {
  const std::string& full = pdserve::v1::FinishReason_Name(reason);
  if (full.empty()) return absl::StrCat(reason);
  const std::string prefix = "FINISH_REASON_";
  return absl::AsciiStrToLower(full.compare(0, prefix.size(), prefix) == 0 ? full.substr(prefix.size()) : full);
}

}  // namespace pdserve
