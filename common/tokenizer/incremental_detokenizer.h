// IncrementalDetokenizer: turns a stream of token ids into valid UTF-8 text
// chunk by chunk, for streaming responses. A character may be split across
// tokens (byte tokenizer, BPE byte fallback), so an incomplete trailing
// sequence is held back until the bytes that finish it arrive.
#pragma once

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace pdserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` is not owned and must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer);

  // Appends the bytes of token `id` and returns the newly completed text:
  // whole UTF-8 characters only. Bytes that can never start or continue a
  // valid character come out as U+FFFD at once; a trailing sequence that may
  // still become valid (at most 3 bytes) is held back. Never fails.
  std::string Push(uint32_t id);

  // Ends the stream: returns the held-back bytes, an incomplete sequence
  // replaced by U+FFFD, and resets so the object can be reused. Never fails.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // incomplete trailing UTF-8 sequence, <= 3 bytes
};

}  // namespace pdserve
