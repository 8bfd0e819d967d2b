// BpeTokenizer's encoder and decoder: added tokens cut out, the
// pre-tokenizer's regex splits, BPE merges by rank, ids back to bytes.
// Loading is in bpe_tokenizer_load.cc.
#include "common/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/bpe_tokenizer_parts.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/utf8.h"

namespace pdserve {

using bpe_internal::PairKey;

BpeTokenizer::BpeTokenizer() { byte_id_.fill(-1); }
BpeTokenizer::~BpeTokenizer() = default;

int32_t BpeTokenizer::MatchAdded(absl::string_view text, size_t pos, bool skip_special) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto next = trie_[node].next.find(static_cast<unsigned char>(text[i]));
    if (next == trie_[node].next.end()) break;
    node = next->second;
    const int32_t token = trie_[node].token;
    if (token >= 0 && !(skip_special && added_[token].special)) best = token;
  }
  return best;
}

absl::StatusOr<std::vector<uint32_t>> BpeTokenizer::Encode(absl::string_view text) const {
  return Encode(text, SpecialTokens::kParse);
}

absl::StatusOr<std::vector<uint32_t>> BpeTokenizer::Encode(absl::string_view text, SpecialTokens special) const {
  if (const size_t bad = FirstInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }

  // 1. Cut added tokens out of the raw text (leftmost, then longest).
  struct Segment {
    absl::string_view text;
    int32_t added;  // index into added_, or -1 for plain text
  };
  std::vector<Segment> segments;
  size_t plain_start = 0;
  if (!trie_.empty()) {
    for (size_t pos = 0; pos < text.size();) {
      if (!added_first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      const int32_t match = MatchAdded(text, pos, special == SpecialTokens::kAsText);
      if (match < 0) {
        ++pos;
        continue;
      }
      segments.push_back({text.substr(plain_start, pos - plain_start), -1});
      segments.push_back({text.substr(pos, added_[match].content.size()), match});
      pos += added_[match].content.size();
      plain_start = pos;
    }
  }
  segments.push_back({text.substr(plain_start), -1});
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].added < 0) continue;
    const AddedToken& t = added_[segments[i].added];
    if (t.lstrip && i > 0) segments[i - 1].text = TrimTrailingWhiteSpace(segments[i - 1].text);
    if (t.rstrip && i + 1 < segments.size()) segments[i + 1].text = TrimLeadingWhiteSpace(segments[i + 1].text);
  }

  // 2-3. Pre-tokenize and merge each plain segment.
  Scratch scratch;
  if (scratch.match == nullptr) return absl::ResourceExhaustedError("out of memory for the pre-tokenizer regex");
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const Segment& seg : segments) {
    if (seg.added >= 0) {
      const AddedToken& t = added_[seg.added];
      if (t.id >= vocab_size_) {
        return absl::InvalidArgumentError(absl::StrCat("the text contains the token '", ClipUtf8(t.content), "' (id ", t.id,
                                                       "), which is outside the model's vocabulary (vocab_size ",
                                                       vocab_size_, ")"));
      }
      ids.push_back(t.id);
      continue;
    }
    if (seg.text.empty()) continue;
    if (absl::Status s = PreTokenize(0, seg.text, scratch, ids); !s.ok()) return s;
  }
  return ids;
}

absl::Status BpeTokenizer::PreTokenize(size_t step_index, absl::string_view piece, Scratch& scratch,
                                       std::vector<uint32_t>& out) const {
  if (piece.empty()) return absl::OkStatus();  // HF drops empty pieces
  if (step_index == steps_.size()) return EncodeWord(piece, scratch, out);
  const Step& step = steps_[step_index];
  if (step.kind == Step::Kind::kByteLevel && step.add_prefix_space && piece[0] != ' ') {
    scratch.owned.push_back(absl::StrCat(" ", piece));
    piece = scratch.owned.back();
  }
  if (step.regex == nullptr) return PreTokenize(step_index + 1, piece, scratch, out);

  // Isolated split: every match and every gap between matches is a piece.
  // Empty matches follow the Oniguruma iterator HF uses: one right after the
  // previous match is skipped by advancing a character.
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  const size_t n = piece.size();
  size_t start = 0;
  size_t prev = 0;  // end of the last emitted piece
  size_t last_match_end = absl::string_view::npos;
  while (start <= n) {
    int rc = pcre2_match(step.regex->code, subject, n, start, PCRE2_NO_UTF_CHECK, scratch.match, scratch.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && scratch.jit_stack == nullptr) {
      // The default 32 KiB JIT stack can run out on long runs; retry this
      // call's matches with a growable one (up to 64 MiB).
      scratch.jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
      scratch.context = pcre2_match_context_create(nullptr);
      if (scratch.jit_stack == nullptr || scratch.context == nullptr) {
        return absl::ResourceExhaustedError("out of memory for the pre-tokenizer regex");
      }
      pcre2_jit_stack_assign(scratch.context, nullptr, scratch.jit_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::ResourceExhaustedError(
          absl::StrCat("pre-tokenizer regex failed on a ", n, "-byte piece: ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match);
    const size_t ms = ov[0], me = ov[1];
    if (ms == me && last_match_end == me) {
      if (me >= n) break;
      start = me + Utf8Length(static_cast<unsigned char>(piece[me]));
      continue;
    }
    if (ms > prev) {
      if (absl::Status s = PreTokenize(step_index + 1, piece.substr(prev, ms - prev), scratch, out); !s.ok()) return s;
    }
    if (me > ms) {
      if (absl::Status s = PreTokenize(step_index + 1, piece.substr(ms, me - ms), scratch, out); !s.ok()) return s;
    }
    prev = me;
    last_match_end = me;
    start = me;
  }
  if (prev < n) return PreTokenize(step_index + 1, piece.substr(prev), scratch, out);
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodeWord(absl::string_view word, Scratch& scratch, std::vector<uint32_t>& out) const {
  // HF's ignore_merges: a piece that is itself a token is emitted whole,
  // even where merging by rank would split it differently.
  if (ignore_merges_) {
    if (auto it = bytes_to_id_.find(word); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return absl::OkStatus();
    }
  }
  if (auto it = scratch.cache.find(word); it != scratch.cache.end()) {
    out.insert(out.end(), scratch.cache_ids.begin() + it->second.first,
               scratch.cache_ids.begin() + it->second.first + it->second.second);
    return absl::OkStatus();
  }

  // One symbol per byte.
  std::vector<Scratch::Symbol>& sym = scratch.symbols;
  sym.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const auto b = static_cast<unsigned char>(word[i]);
    int64_t id = byte_id_[b];
    if (id < 0) {
      if (!unk_id_) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte 0x", absl::Hex(b, absl::kZeroPad2), " has no token and the tokenizer has no unk_token"));
      }
      if (fuse_unk_ && !sym.empty() && sym.back().id == *unk_id_) {
        ++sym.back().len;
        continue;
      }
      id = *unk_id_;
    }
    const auto pos = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(id), pos - 1, pos + 1, 1});
  }
  if (!sym.empty()) sym.back().next = -1;

  // Merge by rank with a heap, as HF's Word::merge_all: O(n log n) even for
  // a 100 KB run of one character. Stale candidates are recognised the way
  // HF does (the pair there no longer merges into the same token).
  std::vector<Scratch::Candidate>& heap = scratch.heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    const Scratch::Symbol& left = sym[pos];
    if (left.next < 0) return;
    auto it = merges_.find(PairKey(left.id, sym[left.next].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, it->second.new_id});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Scratch::Candidate top = heap.back();
    heap.pop_back();
    Scratch::Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    Scratch::Symbol& right = sym[cur.next];
    auto it = merges_.find(PairKey(cur.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    right.len = 0;
    cur.next = right.next;
    if (cur.next >= 0) sym[cur.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }

  const auto offset = static_cast<uint32_t>(scratch.cache_ids.size());
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) scratch.cache_ids.push_back(sym[i].id);
  const auto count = static_cast<uint32_t>(scratch.cache_ids.size() - offset);
  out.insert(out.end(), scratch.cache_ids.begin() + offset, scratch.cache_ids.end());
  scratch.cache.emplace(word, std::make_pair(offset, count));
  return absl::OkStatus();
}

std::string BpeTokenizer::DecodeToken(uint32_t id) const {
  if (id >= token_bytes_.size() || id >= vocab_size_ || special_[id]) return std::string();
  return token_bytes_[id];
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const uint32_t> ids, bool include_special) const {
  IncrementalDetokenizer detok(this);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    if (id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", i, " is not below vocab_size ", vocab_size_));
    }
    if (id < token_bytes_.size() && special_[id]) {
      // Like HF, text on either side of a special token is decoded apart.
      if (include_special) absl::StrAppend(&text, detok.Flush(), token_bytes_[id]);
      continue;
    }
    text += detok.Push(id);
  }
  text += detok.Flush();
  return text;
}

std::optional<uint32_t> BpeTokenizer::AddedTokenId(absl::string_view content) const {
  // From the back: a repeated content resolves to the later entry, as in Encode.
  for (auto it = added_.rbegin(); it != added_.rend(); ++it) {
    if (it->content == content) return it->id;
  }
  return std::nullopt;
}

bool BpeTokenizer::IsSpecial(uint32_t id) const { return id < special_.size() && special_[id]; }

}  // namespace pdserve
