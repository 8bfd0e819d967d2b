#include "common/tokenizer/stop_matcher.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace pdserve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::Push(absl::string_view text) {
  if (stopped_) return {std::string(), true};
  held_.append(text.data(), text.size());
  if (stops_.empty()) {
    Result r{std::move(held_), false};
    held_.clear();
    return r;
  }

  size_t earliest = std::string::npos;
  for (const std::string& s : stops_) {
    earliest = std::min(earliest, held_.find(s));
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    Result r{held_.substr(0, earliest), true};
    held_.clear();
    return r;
  }

  const size_t keep = HoldBackLength();
  Result r{held_.substr(0, held_.size() - keep), false};
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

size_t StopMatcher::HoldBackLength() const {
  size_t best = 0;
  for (const std::string& s : stops_) {
    // Full matches were handled by the caller, so only proper prefixes count.
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > best; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace pdserve
