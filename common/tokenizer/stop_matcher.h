// StopMatcher: stop sequences on generated text, as vLLM does them: the
// stream ends at the first occurrence of any stop string, and the stop string
// itself is not emitted. Text that might be the start of a stop string is
// held back, so a client never sees a stop string split across chunks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pdserve {

class StopMatcher {
 public:
  struct Result {
    std::string emit;  // text safe to send to the client now
    bool stopped;      // a stop string was found; the stream is over
  };

  // Empty stop strings are ignored (they would match immediately); no stops
  // at all makes Push a pass-through.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends newly decoded text. If a stop string now occurs in the text
  // generated so far (also across earlier pushes), returns the not yet
  // emitted text before the earliest match and stopped=true. Otherwise
  // returns everything except the longest suffix that is a prefix of some
  // stop string. After a stop, further pushes return {"", true}.
  Result Push(absl::string_view text);

  // At the end of generation without a stop: returns the held-back text and
  // clears it. Returns "" after a stop (the text after it is dropped).
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop.
  size_t HoldBackLength() const;

  std::vector<std::string> stops_;
  // Generated but not emitted text. Any match must start here: an emitted
  // byte was never part of a possible stop prefix.
  std::string held_;
  bool stopped_ = false;
};

}  // namespace pdserve
