// BpeTokenizer's private parts, shared by its two files: the loader
// (bpe_tokenizer_load.cc: tokenizer.json into the tables) and the encoder
// (bpe_tokenizer.cc: text to ids and back). Not for other users.
//   BpeTokenizer::Regex    a compiled PCRE2 pattern
//   BpeTokenizer::Step     one pre-tokenizer step
//   BpeTokenizer::Scratch  what one Encode call mutates
//   bpe_internal::PairKey  the merges_ key of a (left, right) pair
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/bpe_tokenizer.h"

namespace pdserve {

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

struct BpeTokenizer::Step {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // Split's pattern, or GPT-2's for ByteLevel(use_regex)
  bool add_prefix_space = false;
};

// Everything one Encode call mutates, so the tokenizer itself stays const
// and shareable across threads.
struct BpeTokenizer::Scratch {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;  // only once a bigger JIT stack is needed
  pcre2_jit_stack* jit_stack = nullptr;
  // Pieces built by ByteLevel's prefix space; a deque keeps views valid.
  std::deque<std::string> owned;
  // Per-call word cache: text is prose, so words repeat; the ids of a word
  // are stored once in cache_ids as (offset, count).
  absl::flat_hash_map<absl::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<uint32_t> cache_ids;
  // BPE buffers, reused across words.
  struct Symbol {
    uint32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes covered; 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t new_id;
    // std::push_heap keeps a max-heap: "less" means lower priority, i.e. a
    // higher rank, then a later position (HF merges the leftmost first).
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;

  Scratch() { match = pcre2_match_data_create(1, nullptr); }
  ~Scratch() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

namespace bpe_internal {

inline uint64_t PairKey(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }

}  // namespace bpe_internal
}  // namespace pdserve
