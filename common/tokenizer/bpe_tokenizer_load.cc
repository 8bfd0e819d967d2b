// BpeTokenizer's loader: tokenizer.json parsed, checked against the
// supported subset (bpe_tokenizer.h) and turned into the encoder's tables.
#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model/config.h"  // CheckJsonNesting, JsonExcerpt, kMaxJsonDepth
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/bpe_tokenizer_parts.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {

namespace {

using json = nlohmann::json;

// Ids index a dense table; a hostile file with id 4e9 must not allocate 4e9
// entries. 2^24 is 60x LLaMA-3's vocabulary.
// Ids are dense arrays indexed by id, so the highest id sizes allocations
// (32 bytes per id): the same bound as a model's vocab_size (config.h).
constexpr uint64_t kMaxTokenId = static_cast<uint64_t>(kMaxVocabSize) - 1;
// Pre-tokenizer steps in a Sequence (LLaMA-3 has 2). Encode recurses once
// per step, so this also bounds its stack.
constexpr size_t kMaxPreTokenizerSteps = 64;

// An exception's message for an error, cut short (nlohmann's parse errors
// quote the last token read, which can be as long as the input).
std::string Cut(const char* what) {
  std::string s(what);
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

// The pre-tokenizer regex ByteLevel(use_regex=true) applies (GPT-2's).
constexpr char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma's \s (what HF runs) is Unicode White_Space; PCRE2's UCP \s
// also takes U+180E (via \h). Spelling \s out keeps PCRE2 on HF's side.
constexpr char kWhiteSpaceItems[] =
    R"(\t-\r\x20\x85\xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S in a PCRE2 pattern to Oniguruma's White_Space set. A
// \S inside a character class cannot be spelled out and is left alone, and
// so is any pattern using \Q...\E quoting; neither occurs in known files.
std::string WithOnigurumaSpaces(const std::string& pattern) {
  if (pattern.find("\\Q") != std::string::npos) return pattern;
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : absl::StrCat("[", kWhiteSpaceItems, "]");
      } else if (e == 'S' && !in_class) {
        out += absl::StrCat("[^", kWhiteSpaceItems, "]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // A POSIX class such as [:alpha:] inside a class: copy it whole.
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i + 1, end + 2 - (i + 1));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order, so every byte is a visible char.
std::array<uint32_t, 256> ByteToCodePoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return map;
}

// Inverse of ByteToCodePoint over code points 0..323; -1 where none maps.
std::array<int, 324> CodePointToByte() {
  std::array<int, 324> inv;
  inv.fill(-1);
  const std::array<uint32_t, 256> fwd = ByteToCodePoint();
  for (int b = 0; b < 256; ++b) inv[fwd[b]] = b;
  return inv;
}

// A JSON value for error messages, cut short without serialising all of it.
std::string Show(const json& j) { return JsonExcerpt(j, 60); }

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(what); }

// Optional boolean field; absent or null gives `fallback`.
absl::Status ReadBool(const json& obj, const char* key, const std::string& where, bool fallback, bool* out) {
  *out = fallback;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return Bad(absl::StrCat(where, ".", key, " must be a boolean, found ", Show(*it)));
  *out = it->get<bool>();
  return absl::OkStatus();
}

// Optional string field; absent or null gives "".
absl::Status ReadString(const json& obj, const char* key, const std::string& where, std::string* out) {
  out->clear();
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return Bad(absl::StrCat(where, ".", key, " must be a string, found ", Show(*it)));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadId(const json& value, const std::string& where, uint32_t* out) {
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
    return Bad(absl::StrCat(where, " must be a non-negative integer id, found ", Show(value)));
  }
  const uint64_t id = value.get<uint64_t>();
  if (id > kMaxTokenId) return Bad(absl::StrCat(where, " is ", id, ", above the supported maximum ", kMaxTokenId));
  *out = static_cast<uint32_t>(id);
  return absl::OkStatus();
}

using bpe_internal::PairKey;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(absl::string_view json_text, int64_t vocab_size) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  absl::Status status = tok->Load(json_text, vocab_size);
  if (!status.ok()) return status;
  return tok;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromFile(const std::string& path, int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read tokenizer file ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading tokenizer file ", path));
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = FromJson(buf.str(), vocab_size);
  if (!tok.ok()) return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  return tok;
}

// Load's steps, in the order Load runs them (the order fixes which error a
// file with several faults reports). Each reads one part of tokenizer.json
// into the tokenizer, or returns InvalidArgument naming the field.
struct BpeTokenizer::Loader {
  BpeTokenizer& tok;
  // model.vocab by its text (views into the parsed JSON), as merges and
  // unk_token name tokens.
  absl::flat_hash_map<absl::string_view, uint32_t> text_to_id;
  uint32_t max_vocab_id = 0;  // highest model.vocab id
  uint32_t max_id = 0;        // highest id, added tokens included

  absl::Status Run(const json& root);
  absl::Status ReadModelOptions(const json& model);
  absl::Status ReadVocabIds(const json& vocab);
  absl::Status ReadAddedTokens(const json& root);
  absl::Status ReadAddedToken(const json& t, const std::string& where);
  absl::Status FillTokenBytes();
  absl::Status ReadUnkToken(const json& model);
  absl::Status ReadMerges(const json& model);
  absl::Status ReadMerge(const json& m, size_t rank, std::string& joined);
  absl::Status ReadPreTokenizer(const json& root);
  absl::Status ReadPreTokenizerStep(const json& p, const std::string& where, bool& have_byte_level);
  static absl::StatusOr<std::unique_ptr<Regex>> CompilePattern(std::string pattern, uint32_t options,
                                                               const std::string& where);
  static absl::Status CheckNormalizer(const json& root);
  static absl::Status CheckDecoder(const json& root);
  void BuildAddedTokenTrie();
};

namespace {

// tokenizer.json's text as JSON: DataLoss when it does not parse.
absl::StatusOr<json> ParseTokenizerJson(absl::string_view json_text) {
  // nlohmann's parser and dump() recurse once per level: refuse deep text
  // before parsing it.
  RETURN_IF_ERROR(CheckJsonNesting(json_text, kMaxJsonDepth, "tokenizer.json"));
  try {
    return json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("tokenizer.json is not valid JSON: ", Cut(e.what())));
  }
}

}  // namespace

absl::Status BpeTokenizer::Load(absl::string_view json_text, int64_t vocab_size) {
  ASSIGN_OR_RETURN(const json root, ParseTokenizerJson(json_text));
  int64_t max_vocab = 0;  // highest model.vocab id + 1
  // nlohmann throws type_error on a wrong-typed access; every access below is
  // checked, but keep a net so a missed case is an error, not an abort.
  try {
    Loader loader{*this, {}, 0, 0};
    RETURN_IF_ERROR(loader.Run(root));
    max_vocab = int64_t{loader.max_vocab_id} + 1;
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("tokenizer.json has an unexpected structure: ", Cut(e.what())));
  }
  return SetVocabSize(vocab_size, max_vocab);
}

absl::Status BpeTokenizer::SetVocabSize(int64_t vocab_size, int64_t max_vocab) {
  // The model must score every id of model.vocab (plain text's ids); added
  // tokens past it are checked when the text contains them.
  if (vocab_size == 0) {
    vocab_size_ = num_tokens();
  } else if (vocab_size < max_vocab) {
    return Bad(
        absl::StrCat("vocab_size ", vocab_size, " is smaller than the tokenizer's model.vocab (", max_vocab, " ids)"));
  } else if (vocab_size > (int64_t{1} << 32)) {
    return Bad(absl::StrCat("vocab_size ", vocab_size, " does not fit uint32_t ids"));
  } else {
    vocab_size_ = vocab_size;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Loader::Run(const json& root) {
  if (!root.is_object()) return Bad("tokenizer.json must be a JSON object");
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return Bad("tokenizer.json has no 'model' object");
  const json& model = *model_it;
  RETURN_IF_ERROR(ReadModelOptions(model));
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) return Bad("model.vocab is missing");
  RETURN_IF_ERROR(ReadVocabIds(*vocab_it));
  RETURN_IF_ERROR(ReadAddedTokens(root));
  RETURN_IF_ERROR(FillTokenBytes());
  RETURN_IF_ERROR(ReadUnkToken(model));
  RETURN_IF_ERROR(ReadMerges(model));
  RETURN_IF_ERROR(CheckNormalizer(root));
  RETURN_IF_ERROR(ReadPreTokenizer(root));
  RETURN_IF_ERROR(CheckDecoder(root));
  // Added tokens last: they override any model.vocab entry with their id.
  BuildAddedTokenTrie();
  return absl::OkStatus();
}

// model.type, and the BPE options: the unsupported ones must be off.
absl::Status BpeTokenizer::Loader::ReadModelOptions(const json& model) {
  std::string type;
  RETURN_IF_ERROR(ReadString(model, "type", "model", &type));
  if (!type.empty() && type != "BPE") {
    return Bad(absl::StrCat("model.type is '", ClipUtf8(type), "'; only 'BPE' is supported"));
  }
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    return Bad(absl::StrCat("model.dropout is ", Show(*it), "; BPE dropout is not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string value;
    RETURN_IF_ERROR(ReadString(model, key, "model", &value));
    if (!value.empty()) return Bad(absl::StrCat("model.", key, " is '", ClipUtf8(value), "'; it is not supported"));
  }
  bool byte_fallback = false;
  RETURN_IF_ERROR(ReadBool(model, "byte_fallback", "model", false, &byte_fallback));
  if (byte_fallback) return Bad("model.byte_fallback is true; it is not supported (use a ByteLevel tokenizer)");
  RETURN_IF_ERROR(ReadBool(model, "ignore_merges", "model", false, &tok.ignore_merges_));
  return ReadBool(model, "fuse_unk", "model", false, &tok.fuse_unk_);
}

// Pass 1 over model.vocab: ids and the text -> id map the merges are
// written in.
absl::Status BpeTokenizer::Loader::ReadVocabIds(const json& vocab) {
  if (!vocab.is_object()) return Bad(absl::StrCat("model.vocab must be an object {token: id}, found ", Show(vocab)));
  if (vocab.empty()) return Bad("model.vocab is empty");
  text_to_id.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    uint32_t id;
    RETURN_IF_ERROR(ReadId(it.value(), absl::StrCat("model.vocab['", ClipUtf8(it.key()), "']"), &id));
    text_to_id.emplace(it.key(), id);
    max_vocab_id = std::max(max_vocab_id, id);
  }
  max_id = max_vocab_id;
  return absl::OkStatus();
}

// added_tokens (ids may extend past model.vocab).
absl::Status BpeTokenizer::Loader::ReadAddedTokens(const json& root) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return Bad(absl::StrCat("added_tokens must be an array, found ", Show(*it)));
  for (size_t i = 0; i < it->size(); ++i) {
    RETURN_IF_ERROR(ReadAddedToken((*it)[i], absl::StrCat("added_tokens[", i, "]")));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Loader::ReadAddedToken(const json& t, const std::string& where) {
  if (!t.is_object()) return Bad(absl::StrCat(where, " must be an object, found ", Show(t)));
  AddedToken added;
  auto id_it = t.find("id");
  if (id_it == t.end()) return Bad(absl::StrCat(where, ".id is missing"));
  RETURN_IF_ERROR(ReadId(*id_it, where + ".id", &added.id));
  RETURN_IF_ERROR(ReadString(t, "content", where, &added.content));
  if (added.content.empty()) return Bad(absl::StrCat(where, ".content is missing or empty"));
  if (FirstInvalidUtf8(added.content) != absl::string_view::npos) {
    return Bad(absl::StrCat(where, ".content is not valid UTF-8"));
  }
  RETURN_IF_ERROR(ReadBool(t, "special", where, false, &added.special));
  RETURN_IF_ERROR(ReadBool(t, "lstrip", where, false, &added.lstrip));
  RETURN_IF_ERROR(ReadBool(t, "rstrip", where, false, &added.rstrip));
  max_id = std::max(max_id, added.id);
  tok.added_.push_back(std::move(added));
  return absl::OkStatus();
}

// Pass 2: per-id bytes. A token written in GPT-2 characters decodes to the
// bytes they stand for; one with any other character decodes to its own
// UTF-8, as HF's ByteLevel decoder does, and encode never reaches it.
absl::Status BpeTokenizer::Loader::FillTokenBytes() {
  const std::array<int, 324> char_to_byte = CodePointToByte();
  tok.token_bytes_.assign(static_cast<size_t>(max_id) + 1, std::string());
  tok.special_.assign(static_cast<size_t>(max_id) + 1, false);
  std::vector<bool> seen(static_cast<size_t>(max_vocab_id) + 1, false);
  for (const auto& [text, id] : text_to_id) {
    if (seen[id]) return Bad(absl::StrCat("model.vocab gives id ", id, " to more than one token"));
    seen[id] = true;
    std::string bytes;
    bool byte_level = true;
    for (size_t pos = 0; pos < text.size();) {
      uint32_t cp;
      const size_t len = DecodeUtf8(text, pos, &cp);
      if (len == 0) return Bad(absl::StrCat("model.vocab token with id ", id, " is not valid UTF-8"));
      if (cp >= char_to_byte.size() || char_to_byte[cp] < 0) {
        byte_level = false;
        break;
      }
      bytes.push_back(static_cast<char>(char_to_byte[cp]));
      pos += len;
    }
    if (!byte_level) {
      tok.token_bytes_[id] = std::string(text);
      continue;
    }
    if (bytes.size() == 1) tok.byte_id_[static_cast<unsigned char>(bytes[0])] = id;
    tok.token_bytes_[id] = bytes;
    tok.bytes_to_id_.emplace(std::move(bytes), id);
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Loader::ReadUnkToken(const json& model) {
  std::string unk;
  RETURN_IF_ERROR(ReadString(model, "unk_token", "model", &unk));
  if (unk.empty()) return absl::OkStatus();
  auto it = text_to_id.find(unk);
  if (it == text_to_id.end()) return Bad(absl::StrCat("model.unk_token '", ClipUtf8(unk), "' is not in model.vocab"));
  tok.unk_id_ = it->second;
  return absl::OkStatus();
}

// model.merges: "a b" strings or [a, b] pairs; rank = position.
absl::Status BpeTokenizer::Loader::ReadMerges(const json& model) {
  auto merges_it = model.find("merges");
  if (merges_it == model.end()) return Bad("model.merges is missing (an empty list is allowed)");
  if (!merges_it->is_array()) return Bad(absl::StrCat("model.merges must be an array, found ", Show(*merges_it)));
  tok.merges_.reserve(merges_it->size());
  std::string joined;
  for (size_t rank = 0; rank < merges_it->size(); ++rank) {
    RETURN_IF_ERROR(ReadMerge((*merges_it)[rank], rank, joined));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Loader::ReadMerge(const json& m, size_t rank, std::string& joined) {
  const std::string where = absl::StrCat("model.merges[", rank, "]");
  absl::string_view left, right;
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    // Exactly one space, as HF requires.
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Bad(absl::StrCat(where, " is ", Show(m), "; expected two tokens separated by one space"));
    }
    left = absl::string_view(s).substr(0, space);
    right = absl::string_view(s).substr(space + 1);
  } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    left = m[0].get_ref<const std::string&>();
    right = m[1].get_ref<const std::string&>();
  } else {
    return Bad(absl::StrCat(where, " is ", Show(m), "; expected \"a b\" or [\"a\", \"b\"]"));
  }
  auto l = text_to_id.find(left);
  auto r = text_to_id.find(right);
  joined.assign(left.data(), left.size());
  joined.append(right.data(), right.size());
  auto n = text_to_id.find(joined);
  for (const auto& [found, part] :
       {std::make_pair(l != text_to_id.end(), left), std::make_pair(r != text_to_id.end(), right),
        std::make_pair(n != text_to_id.end(), absl::string_view(joined))}) {
    if (!found) return Bad(absl::StrCat(where, " (", Show(m), ") uses '", ClipUtf8(part), "', which is not in model.vocab"));
  }
  // A repeated pair keeps the later rank, as HF's HashMap collect does.
  tok.merges_[PairKey(l->second, r->second)] = Merge{static_cast<uint32_t>(rank), n->second};
  return absl::OkStatus();
}

// normalizer must be null.
absl::Status BpeTokenizer::Loader::CheckNormalizer(const json& root) {
  if (auto it = root.find("normalizer"); it != root.end() && !it->is_null()) {
    const std::string what = it->is_object() && it->contains("type") ? Show((*it)["type"]) : Show(*it);
    return Bad(absl::StrCat("normalizer ", what, " is not supported (only null)"));
  }
  return absl::OkStatus();
}

// decoder must be ByteLevel or null.
absl::Status BpeTokenizer::Loader::CheckDecoder(const json& root) {
  if (auto it = root.find("decoder"); it != root.end() && !it->is_null()) {
    std::string dtype;
    if (!it->is_object()) return Bad("decoder must be an object");
    RETURN_IF_ERROR(ReadString(*it, "type", "decoder", &dtype));
    if (dtype != "ByteLevel") return Bad(absl::StrCat("decoder.type is '", ClipUtf8(dtype), "'; only ByteLevel is supported"));
  }
  return absl::OkStatus();
}

// pre_tokenizer: [Split...] then ByteLevel, alone or in a Sequence.
absl::Status BpeTokenizer::Loader::ReadPreTokenizer(const json& root) {
  auto pre_it = root.find("pre_tokenizer");
  if (pre_it == root.end() || !pre_it->is_object()) {
    return Bad("pre_tokenizer is missing; a byte-level BPE needs a ByteLevel pre-tokenizer");
  }
  std::vector<const json*> pre_steps;
  std::string pre_type;
  RETURN_IF_ERROR(ReadString(*pre_it, "type", "pre_tokenizer", &pre_type));
  if (pre_type == "Sequence") {
    auto list = pre_it->find("pretokenizers");
    if (list == pre_it->end() || !list->is_array()) return Bad("pre_tokenizer.pretokenizers must be an array");
    // Encode runs the steps recursively (one frame per step): bound them.
    if (list->size() > kMaxPreTokenizerSteps) {
      return Bad(absl::StrCat("pre_tokenizer.pretokenizers has ", list->size(), " steps, at most ",
                              kMaxPreTokenizerSteps, " are supported"));
    }
    for (const json& p : *list) pre_steps.push_back(&p);
  } else {
    pre_steps.push_back(&*pre_it);
  }
  bool have_byte_level = false;
  for (size_t i = 0; i < pre_steps.size(); ++i) {
    const std::string where =
        pre_type == "Sequence" ? absl::StrCat("pre_tokenizer.pretokenizers[", i, "]") : std::string("pre_tokenizer");
    RETURN_IF_ERROR(ReadPreTokenizerStep(*pre_steps[i], where, have_byte_level));
  }
  if (!have_byte_level) return Bad("pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  return absl::OkStatus();
}

// One Split (behavior Isolated, a Regex or String pattern) or ByteLevel step.
absl::Status BpeTokenizer::Loader::ReadPreTokenizerStep(const json& p, const std::string& where,
                                                        bool& have_byte_level) {
  if (!p.is_object()) return Bad(absl::StrCat(where, " must be an object"));
  std::string ptype;
  RETURN_IF_ERROR(ReadString(p, "type", where, &ptype));
  if (have_byte_level) return Bad(absl::StrCat(where, " (", ClipUtf8(ptype), ") after ByteLevel is not supported"));
  Step step;
  std::string pattern;
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (ptype == "Split") {
    std::string behavior;
    RETURN_IF_ERROR(ReadString(p, "behavior", where, &behavior));
    if (behavior != "Isolated") {
      return Bad(absl::StrCat(where, ".behavior is '", ClipUtf8(behavior), "'; only 'Isolated' is supported"));
    }
    bool invert = false;
    RETURN_IF_ERROR(ReadBool(p, "invert", where, false, &invert));
    if (invert) return Bad(absl::StrCat(where, ".invert is true; it is not supported"));
    auto pat = p.find("pattern");
    if (pat != p.end() && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      pattern = (*pat)["Regex"].get<std::string>();
    } else if (pat != p.end() && pat->is_object() && pat->contains("String") && (*pat)["String"].is_string()) {
      pattern = (*pat)["String"].get<std::string>();
      options = PCRE2_UTF | PCRE2_LITERAL;  // PCRE2 refuses UCP with LITERAL
    } else {
      return Bad(absl::StrCat(where, ".pattern must be {\"Regex\": ...} or {\"String\": ...}"));
    }
    if (pattern.empty()) return Bad(absl::StrCat(where, ".pattern is empty"));
    step.kind = Step::Kind::kSplit;
  } else if (ptype == "ByteLevel") {
    bool use_regex = true;
    RETURN_IF_ERROR(ReadBool(p, "use_regex", where, true, &use_regex));
    RETURN_IF_ERROR(ReadBool(p, "add_prefix_space", where, false, &step.add_prefix_space));
    if (use_regex) pattern = kGpt2Pattern;
    step.kind = Step::Kind::kByteLevel;
    have_byte_level = true;
  } else {
    return Bad(absl::StrCat(where, ".type is '", ClipUtf8(ptype), "'; only Split and ByteLevel are supported"));
  }
  if (!pattern.empty()) {
    ASSIGN_OR_RETURN(step.regex, CompilePattern(std::move(pattern), options, where));
  }
  tok.steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BpeTokenizer::Regex>> BpeTokenizer::Loader::CompilePattern(
    std::string pattern, uint32_t options, const std::string& where) {
  if ((options & PCRE2_LITERAL) == 0) pattern = WithOnigurumaSpaces(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Bad(absl::StrCat(where, ".pattern does not compile at offset ", offset, ": ",
                            reinterpret_cast<const char*>(message)));
  }
  auto regex = std::make_unique<Regex>();
  regex->code = code;
  // JIT is ~10x faster; without it (unsupported CPU) pcre2_match falls back
  // to the interpreter on its own.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return regex;
}

// Added tokens override any model.vocab entry with their id, and go into the
// trie Encode cuts them out of the text with.
void BpeTokenizer::Loader::BuildAddedTokenTrie() {
  for (size_t i = 0; i < tok.added_.size(); ++i) {
    const AddedToken& t = tok.added_[i];
    tok.token_bytes_[t.id] = t.content;
    tok.special_[t.id] = t.special;
    if (tok.trie_.empty()) tok.trie_.emplace_back();
    int32_t node = 0;
    for (const char c : t.content) {
      const auto b = static_cast<unsigned char>(c);
      auto next = tok.trie_[node].next.find(b);
      if (next == tok.trie_[node].next.end()) {
        tok.trie_.emplace_back();
        next = tok.trie_[node].next.emplace(b, static_cast<int32_t>(tok.trie_.size() - 1)).first;
      }
      node = next->second;
    }
    tok.trie_[node].token = static_cast<int32_t>(i);  // a repeated content: the later entry wins
    tok.added_first_byte_[static_cast<unsigned char>(t.content[0])] = true;
  }
}

}  // namespace pdserve
