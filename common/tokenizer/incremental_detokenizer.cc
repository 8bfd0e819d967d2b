#include "common/tokenizer/incremental_detokenizer.h"

#include <cstddef>
#include <string>

namespace pdserve {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence `lead` starts, or 0 when it cannot start one
// (continuation bytes, overlong C0/C1, F5-FF beyond U+10FFFF).
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `b` may be the second byte after `lead`. The narrowed ranges reject
// overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4),
// as in the Unicode well-formed byte sequence table.
bool ValidSecond(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

bool IsContinuation(unsigned char b) { return b >= 0x80 && b <= 0xBF; }

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer)
    : tokenizer_(tokenizer) {}

std::string IncrementalDetokenizer::Push(uint32_t id) {
  pending_ += tokenizer_->DecodeToken(id);
  std::string out;
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const auto lead = static_cast<unsigned char>(pending_[i]);
    const int len = SequenceLength(lead);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // Count how many bytes of the sequence are present and well formed.
    int good = 1;
    while (good < len && i + good < n) {
      const auto b = static_cast<unsigned char>(pending_[i + good]);
      if (!(good == 1 ? ValidSecond(lead, b) : IsContinuation(b))) break;
      ++good;
    }
    if (good == len) {
      out.append(pending_, i, len);
      i += len;
    } else if (i + good == n) {
      // A valid prefix that runs to the end: more bytes may complete it.
      break;
    } else {
      // Broken by a bad byte: one U+FFFD for the maximal valid prefix (the
      // Unicode "maximal subpart" rule); the bad byte is examined afresh.
      out += kReplacement;
      i += good;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  // Push leaves only a valid but incomplete prefix behind: one maximal subpart.
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace pdserve
