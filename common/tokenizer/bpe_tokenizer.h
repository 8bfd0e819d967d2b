// BpeTokenizer: byte-level BPE loaded from a HuggingFace `tokenizer.json`
// (LLaMA-3, GPT-2 style), producing the same ids as HuggingFace tokenizers
// with add_special_tokens=false.
//
// The pipeline, as HF runs it:
//   1. added tokens (`added_tokens`) are cut out of the raw text first,
//      leftmost-longest, and become single ids (those marked special only
//      with SpecialTokens::kParse, see Encode);
//   2. each remaining segment goes through the pre-tokenizer: zero or more
//      `Split` regexes (behavior Isolated; PCRE2 with UTF+UCP stands in for
//      Oniguruma, with \s spelled out as Oniguruma's White_Space set) and
//      then `ByteLevel` (bytes to GPT-2 characters, optional prefix space,
//      optional GPT-2 regex);
//   3. each piece is BPE-merged by rank; with `ignore_merges` a piece that is
//      itself a vocabulary token is emitted whole without merging.
// Encode never adds BOS/EOS: the post-processor is not applied.
//
// Supported subset (anything else is rejected at load with InvalidArgument
// naming the field): model.type "BPE" without dropout, continuing-subword
// prefix, end-of-word suffix or byte fallback; normalizer null; decoder
// ByteLevel (or null). Added tokens' lstrip/rstrip strip whitespace next to
// the token as transformers.js does; single_word and normalized are ignored
// (every added token is matched on the raw text, as transformers.js does).
//
// Thread safety: all methods are const and safe to call concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {

class BpeTokenizer : public Tokenizer {
 public:
  ~BpeTokenizer() override;
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // Parses `json_text` (the contents of a tokenizer.json). `vocab_size` is
  // the model's output size; 0 means the tokenizer's own (highest id + 1).
  // Returns DataLoss when the text is not JSON (e.g. a truncated download),
  // InvalidArgument naming the field when the JSON is not a supported
  // byte-level BPE tokenizer (missing model.vocab, merges naming unknown
  // tokens, an unknown model type, a bad regex, ...) or when vocab_size is
  // smaller than model.vocab or above 2^32. The text is refused before
  // parsing when it nests JSON deeper than kMaxJsonDepth (64), and a
  // pre_tokenizer Sequence may have at most 64 steps.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(absl::string_view json_text, int64_t vocab_size = 0);

  // Reads `path` and calls FromJson. Returns NotFound naming the path when
  // the file cannot be read, else FromJson's errors prefixed with the path.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromFile(const std::string& path, int64_t vocab_size = 0);

  // What Encode does with text that spells an added token marked special
  // ("<|eot_id|>", gpt-oss's "<|start|>").
  enum class SpecialTokens {
    // It becomes the token's id: HF's default, and what the Tokenizer
    // interface's Encode(text) does (so every caller that only holds a
    // Tokenizer, e.g. the router encoding a request's text, parses them).
    kParse,
    // It is encoded as the characters it is made of, like any other text:
    // tiktoken's encode_ordinary, gpt-tokenizer with no special token
    // allowed or disallowed, HF's split_special_tokens. Added tokens not
    // marked special are still cut out, as HF does.
    kAsText,
  };

  // Text to ids. Returns InvalidArgument when the text is not valid UTF-8
  // ("text is not valid UTF-8 at byte N": rejected, not replaced, so the
  // model never sees a prompt the caller did not send), when it contains an
  // added token whose id is not below vocab_size (LLaMA-3's special tokens
  // are 128000-128255, outside a 128000-id model; with kAsText only the
  // non-special ones count), or when a byte has no token and the model has
  // no unk_token. Returns ResourceExhausted if the regex engine hits its
  // match limits (pathological input).
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text, SpecialTokens special) const;
  // Encode(text, SpecialTokens::kParse).
  absl::StatusOr<std::vector<uint32_t>> Encode(absl::string_view text) const override;

  // The raw bytes of one token (possibly part of a UTF-8 character; feed
  // ids to IncrementalDetokenizer for text). Special added tokens, ids with
  // no token and ids out of range decode to "". Never fails.
  std::string DecodeToken(uint32_t id) const override;

  // Whole-sequence decode to valid UTF-8: bytes that do not form whole
  // characters become U+FFFD, exactly as IncrementalDetokenizer emits them.
  // Special tokens are dropped, or written as their text with
  // `include_special`. Returns InvalidArgument "token id N at position I is
  // not below vocab_size V" for an id the model cannot produce; ids below
  // vocab_size without a token decode to "".
  absl::StatusOr<std::string> Decode(absl::Span<const uint32_t> ids, bool include_special = false) const;

  int64_t vocab_size() const override { return vocab_size_; }
  // Highest id the tokenizer defines, plus one (128256 for LLaMA-3).
  int64_t num_tokens() const { return static_cast<int64_t>(token_bytes_.size()); }
  // The id of an added token by its exact text (e.g. "<|end_of_text|>"),
  // or nullopt when there is none.
  std::optional<uint32_t> AddedTokenId(absl::string_view content) const;
  // Whether `id` is an added token marked special (decodes to "").
  bool IsSpecial(uint32_t id) const;

 private:
  struct Regex;    // a compiled PCRE2 pattern (JIT when available)
  struct Step;     // one pre-tokenizer step
  struct Scratch;  // per-call buffers and word cache
  struct Loader;   // Load's steps, one per part of tokenizer.json
  struct Merge {
    uint32_t rank;
    uint32_t new_id;
  };
  struct AddedToken {
    std::string content;
    uint32_t id;
    bool special;
    bool lstrip;
    bool rstrip;
  };
  struct TrieNode {
    absl::flat_hash_map<unsigned char, int32_t> next;
    int32_t token = -1;  // index into added_, or -1
  };

  BpeTokenizer();

  absl::Status Load(absl::string_view json_text, int64_t vocab_size);
  // The model's output size against model.vocab's (Load's last check).
  absl::Status SetVocabSize(int64_t vocab_size, int64_t max_vocab);
  // Runs pre-tokenizer steps [step, end) on `piece`, then BPE.
  absl::Status PreTokenize(size_t step, absl::string_view piece, Scratch& scratch, std::vector<uint32_t>& out) const;
  // BPE on one pre-token (raw bytes), with the per-call cache.
  absl::Status EncodeWord(absl::string_view word, Scratch& scratch, std::vector<uint32_t>& out) const;
  // The longest added token starting at text[pos], as an index into added_;
  // with `skip_special` only tokens not marked special count.
  int32_t MatchAdded(absl::string_view text, size_t pos, bool skip_special) const;

  int64_t vocab_size_ = 0;
  // Per id: the bytes it decodes to ("" for none) and whether it is special.
  std::vector<std::string> token_bytes_;
  std::vector<bool> special_;
  // model.vocab keyed by raw bytes (the GPT-2 characters undone), so BPE
  // runs on bytes without mapping each piece to characters first.
  absl::flat_hash_map<std::string, uint32_t> bytes_to_id_;
  std::array<int64_t, 256> byte_id_;             // single-byte token, or -1
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left << 32 | right)
  bool ignore_merges_ = false;
  std::optional<uint32_t> unk_id_;
  bool fuse_unk_ = false;
  std::vector<Step> steps_;
  std::vector<AddedToken> added_;
  std::vector<TrieNode> trie_;  // trie_[0] is the root; empty when no added tokens
  std::array<bool, 256> added_first_byte_{};
};

}  // namespace pdserve
