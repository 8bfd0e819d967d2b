#include "common/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model/config.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kLlamaRegex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------
// Helpers

// GPT-2's byte -> character map, written out independently of the library.
std::string ByteChar(unsigned char b) {
  int cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Raw bytes -> the token string tokenizer.json writes for them.
std::string ToTokenText(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) out += ByteChar(static_cast<unsigned char>(c));
  return out;
}

// A small byte-level BPE in LLaMA-3's shape: 256 byte tokens (ids 0-255 in
// byte order), then one token per merge in order, then `extra_vocab` (raw
// bytes), then added tokens. Merges are given as raw-byte pairs.
struct TinySpec {
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> extra_vocab;
  bool ignore_merges = false;
  bool merges_as_pairs = false;
  std::vector<std::string> drop_bytes;  // single bytes left out of the vocab
  json pre_tokenizer;                   // null: LLaMA-3's Sequence
};

json TinyJson(const TinySpec& spec) {
  json vocab = json::object();
  uint32_t next = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    bool drop = false;
    for (const std::string& d : spec.drop_bytes) drop |= d == byte;
    if (!drop) vocab[ToTokenText(byte)] = next;
    ++next;
  }
  json merges = json::array();
  for (const auto& [a, b] : spec.merges) {
    const std::string ta = ToTokenText(a), tb = ToTokenText(b);
    if (!vocab.contains(ta + tb)) vocab[ta + tb] = next++;
    if (spec.merges_as_pairs) {
      merges.push_back(json::array({ta, tb}));
    } else {
      merges.push_back(ta + " " + tb);
    }
  }
  for (const std::string& t : spec.extra_vocab) vocab[ToTokenText(t)] = next++;
  json pre = spec.pre_tokenizer;
  if (pre.is_null()) {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", kLlamaRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  }
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", next}, {"content", "<|eot|>"}, {"special", true}, {"lstrip", false}, {"rstrip", false}},
        {{"id", next + 1}, {"content", "<|eot|>x"}, {"special", true}},
        {{"id", next + 2}, {"content", "[plain]"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", spec.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

std::unique_ptr<BpeTokenizer> Tiny(const TinySpec& spec) {
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(TinyJson(spec).dump());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// The id TinyJson gives the merge result or extra token `bytes`.
uint32_t TinyId(const TinySpec& spec, const std::string& bytes) {
  const json j = TinyJson(spec);
  return j["model"]["vocab"][ToTokenText(bytes)].get<uint32_t>();
}

std::vector<uint32_t> EncodeOk(const Tokenizer& tok, const std::string& text) {
  absl::StatusOr<std::vector<uint32_t>> ids = tok.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status() << " for " << text;
  return ids.ok() ? *ids : std::vector<uint32_t>{};
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80                   ? 1
                 : (b >= 0xC2 && b <= 0xDF) ? 2
                 : (b >= 0xE0 && b <= 0xEF) ? 3
                 : (b >= 0xF0 && b <= 0xF4) ? 4
                                            : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Streams ids through IncrementalDetokenizer; every chunk must be whole
// characters.
std::string Stream(const Tokenizer& tok, const std::vector<uint32_t>& ids) {
  IncrementalDetokenizer detok(&tok);
  std::string out;
  for (const uint32_t id : ids) {
    const std::string chunk = detok.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "chunk splits a character";
    out += chunk;
  }
  return out + detok.Flush();
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "bpe_tokenizer_test_XXXXXX").string();
    path_ = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string path = path_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---------------------------------------------------------------------------
// The hand-written tokenizer: runs without the LLaMA-3 file.

TinySpec HelloSpec() {
  TinySpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"}, {" ", "w"},
                 {"o", "r"}, {" w", "or"}, {"l", "d"},   {" wor", "ld"}};
  return spec;
}

TEST(TinyBpeTest, MergesWordsAndSplitsLikeLlama) {
  const TinySpec spec = HelloSpec();
  auto tok = Tiny(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(EncodeOk(*tok, "hello world"), (std::vector<uint32_t>{TinyId(spec, "hello"), TinyId(spec, " world")}));
  // No merge applies: one id per byte.
  EXPECT_EQ(EncodeOk(*tok, "xyz"), (std::vector<uint32_t>{'x', 'y', 'z'}));
  // The split regex isolates digits in threes and the newline run.
  EXPECT_EQ(EncodeOk(*tok, "1234\n\n"), (std::vector<uint32_t>{'1', '2', '3', '4', '\n', '\n'}));
  EXPECT_TRUE(EncodeOk(*tok, "").empty());
  EXPECT_EQ(tok->vocab_size(), tok->num_tokens());
}

TEST(TinyBpeTest, LowerRankMergesFirst) {
  TinySpec ab_first;
  ab_first.merges = {{"a", "b"}, {"b", "c"}};
  TinySpec bc_first;
  bc_first.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(EncodeOk(*Tiny(ab_first), "abc"), (std::vector<uint32_t>{TinyId(ab_first, "ab"), 'c'}));
  EXPECT_EQ(EncodeOk(*Tiny(bc_first), "abc"), (std::vector<uint32_t>{'a', TinyId(bc_first, "bc")}));
}

TEST(TinyBpeTest, EqualPairsMergeLeftmostFirst) {
  TinySpec spec;
  spec.merges = {{"a", "a"}};
  auto tok = Tiny(spec);
  const uint32_t aa = TinyId(spec, "aa");
  EXPECT_EQ(EncodeOk(*tok, "aaa"), (std::vector<uint32_t>{aa, 'a'}));
  EXPECT_EQ(EncodeOk(*tok, "aaaaa"), (std::vector<uint32_t>{aa, aa, 'a'}));
}

TEST(TinyBpeTest, MergesAsPairsEqualMergesAsStrings) {
  TinySpec strings = HelloSpec();
  TinySpec pairs = HelloSpec();
  pairs.merges_as_pairs = true;
  for (const std::string text : {"hello world", "hell or held", "worldhello"}) {
    EXPECT_EQ(EncodeOk(*Tiny(strings), text), EncodeOk(*Tiny(pairs), text)) << text;
  }
}

TEST(TinyBpeTest, IgnoreMergesTakesWholeVocabularyWords) {
  // "abc" is a token, but no merge chain builds it.
  TinySpec spec;
  spec.merges = {{"a", "b"}};
  spec.extra_vocab = {"abc"};
  EXPECT_EQ(EncodeOk(*Tiny(spec), "abc"), (std::vector<uint32_t>{TinyId(spec, "ab"), 'c'}));
  spec.ignore_merges = true;
  EXPECT_EQ(EncodeOk(*Tiny(spec), "abc"), (std::vector<uint32_t>{TinyId(spec, "abc")}));
  // Words that are not tokens still merge.
  EXPECT_EQ(EncodeOk(*Tiny(spec), "abd"), (std::vector<uint32_t>{TinyId(spec, "ab"), 'd'}));
}

TEST(TinyBpeTest, AddedTokensAreWholeTokensLongestFirst) {
  const TinySpec spec = HelloSpec();
  auto tok = Tiny(spec);
  const uint32_t eot = *tok->AddedTokenId("<|eot|>");
  const uint32_t eot_x = *tok->AddedTokenId("<|eot|>x");
  const uint32_t plain = *tok->AddedTokenId("[plain]");
  EXPECT_EQ(EncodeOk(*tok, "hello<|eot|> world"),
            (std::vector<uint32_t>{TinyId(spec, "hello"), eot, TinyId(spec, " world")}));
  EXPECT_EQ(EncodeOk(*tok, "<|eot|>x<|eot|>"), (std::vector<uint32_t>{eot_x, eot}));
  EXPECT_EQ(EncodeOk(*tok, "<|eot|"), (std::vector<uint32_t>{'<', '|', 'e', 'o', 't', '|'}));
  EXPECT_TRUE(tok->IsSpecial(eot));
  EXPECT_FALSE(tok->IsSpecial(plain));
  EXPECT_FALSE(tok->AddedTokenId("<|nope|>").has_value());
  // Special tokens decode to "" (the interface), or to their text on request;
  // a non-special added token always decodes to its text.
  EXPECT_EQ(tok->DecodeToken(eot), "");
  EXPECT_EQ(tok->DecodeToken(plain), "[plain]");
  const std::vector<uint32_t> ids = EncodeOk(*tok, "hello<|eot|>[plain]");
  EXPECT_EQ(*tok->Decode(ids), "hello[plain]");
  EXPECT_EQ(*tok->Decode(ids, /*include_special=*/true), "hello<|eot|>[plain]");
}

TEST(TinyBpeTest, SpecialTokensAsTextAreOrdinaryText) {
  const TinySpec spec = HelloSpec();
  auto tok = Tiny(spec);
  const uint32_t eot = *tok->AddedTokenId("<|eot|>");
  const uint32_t plain = *tok->AddedTokenId("[plain]");
  using Special = BpeTokenizer::SpecialTokens;
  const std::vector<uint32_t> eot_chars = {'<', '|', 'e', 'o', 't', '|', '>'};
  EXPECT_EQ(*tok->Encode("<|eot|>", Special::kAsText), eot_chars);
  EXPECT_EQ(*tok->Encode("<|eot|>", Special::kParse), std::vector<uint32_t>{eot});
  EXPECT_EQ(*tok->Encode("<|eot|>"), std::vector<uint32_t>{eot});  // the Tokenizer interface parses
  // Added tokens not marked special are still cut out, as HF's
  // split_special_tokens does.
  std::vector<uint32_t> want = eot_chars;
  want.push_back('x');
  want.push_back(plain);
  EXPECT_EQ(*tok->Encode("<|eot|>x[plain]", Special::kAsText), want);
  EXPECT_EQ(*tok->Decode(*tok->Encode("hello<|eot|>x[plain]", Special::kAsText)), "hello<|eot|>x[plain]");
  // As text, a special token outside the model's vocabulary is no error.
  auto narrow = BpeTokenizer::FromJson(TinyJson(spec).dump(), eot);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_EQ(*(*narrow)->Encode("<|eot|>", Special::kAsText), eot_chars);
  EXPECT_FALSE((*narrow)->Encode("<|eot|>", Special::kParse).ok());
}

TEST(TinyBpeTest, AddedTokenOutsideModelVocabIsRejectedOnEncode) {
  const std::string text = TinyJson(HelloSpec()).dump();
  auto own = BpeTokenizer::FromJson(text);
  ASSERT_TRUE(own.ok());
  const uint32_t eot = *(*own)->AddedTokenId("<|eot|>");
  // A model that scores only the base vocabulary cannot take <|eot|>.
  auto narrow = BpeTokenizer::FromJson(text, eot);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  absl::StatusOr<std::vector<uint32_t>> ids = (*narrow)->Encode("hi<|eot|>");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("<|eot|>"), absl::string_view::npos) << ids.status();
  EXPECT_TRUE((*narrow)->Encode("hello").ok());
  // Smaller than model.vocab: refused at load.
  auto too_small = BpeTokenizer::FromJson(text, 100);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TinyBpeTest, DecodeTokenIsRawBytesAndStreamingNeverSplitsACharacter) {
  TinySpec spec;  // no merges: "é" is two byte tokens
  auto tok = Tiny(spec);
  const std::string text = "caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80!";  // café 日 😀!
  const std::vector<uint32_t> ids = EncodeOk(*tok, text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok->DecodeToken(ids[3]), "\xC3");  // half of é
  std::string concat;
  for (const uint32_t id : ids) concat += tok->DecodeToken(id);
  EXPECT_EQ(concat, text);
  EXPECT_EQ(Stream(*tok, ids), text);
  EXPECT_EQ(*tok->Decode(ids), text);
  // A cut-off sequence becomes one U+FFFD, the same in both decoders.
  const std::vector<uint32_t> cut(ids.begin(), ids.begin() + 4);
  EXPECT_EQ(*tok->Decode(cut), "caf\xEF\xBF\xBD");
  EXPECT_EQ(Stream(*tok, cut), "caf\xEF\xBF\xBD");
}

TEST(TinyBpeTest, OutOfRangeIds) {
  auto tok = Tiny(HelloSpec());
  const auto n = static_cast<uint32_t>(tok->vocab_size());
  EXPECT_EQ(tok->DecodeToken(n), "");
  EXPECT_EQ(tok->DecodeToken(0xFFFFFFFFu), "");
  absl::StatusOr<std::string> text = tok->Decode({'h', n, 'i'});
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find(absl::StrCat("token id ", n, " at position 1")), absl::string_view::npos)
      << text.status();
  // An id the model scores but the tokenizer lacks decodes to nothing.
  auto wide = BpeTokenizer::FromJson(TinyJson(HelloSpec()).dump(), n + 10);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(*(*wide)->Decode({'h', n + 5, 'i'}), "hi");
}

TEST(TinyBpeTest, InvalidUtf8IsRejected) {
  auto tok = Tiny(HelloSpec());
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"ab\xFF", "byte 2"}, {"\xC3", "byte 0"}, {"x\xED\xA0\x80", "byte 1"}, {"\xC0\x80", "byte 0"}}) {
    absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode(text);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("not valid UTF-8 at " + where), absl::string_view::npos) << ids.status();
  }
  // NUL is valid UTF-8.
  EXPECT_EQ(EncodeOk(*tok, std::string("a\0b", 3)).size(), 3u);
}

TEST(TinyBpeTest, ByteWithoutTokenIsAnError) {
  TinySpec spec;
  spec.drop_bytes = {"z"};
  auto tok = Tiny(spec);
  absl::StatusOr<std::vector<uint32_t>> ids = tok->Encode("lazy");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("0x7a"), absl::string_view::npos) << ids.status();
}

TEST(TinyBpeTest, ByteLevelRegexAndPrefixSpace) {
  TinySpec spec = HelloSpec();
  spec.pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto tok = Tiny(spec);
  // The prefix space makes "hello" " hello"; no merge joins the space to it.
  EXPECT_EQ(EncodeOk(*tok, "hello world"), (std::vector<uint32_t>{' ', TinyId(spec, "hello"), TinyId(spec, " world")}));
  // GPT-2's regex: pieces " ab" and " 12", no merges apply.
  EXPECT_EQ(EncodeOk(*tok, "ab 12"), (std::vector<uint32_t>{' ', 'a', 'b', ' ', '1', '2'}));
}

TEST(TinyBpeTest, SplitWithALiteralString) {
  TinySpec spec = HelloSpec();
  spec.pre_tokenizer = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  auto tok = Tiny(spec);
  // "." is literal, not "any character"; " world" stays one piece.
  EXPECT_EQ(EncodeOk(*tok, "hello. world"),
            (std::vector<uint32_t>{TinyId(spec, "hello"), '.', TinyId(spec, " world")}));
}

// A word of 1,000,000 characters: a merge loop linear (or n log n) in its
// length finishes in about a second; a quadratic one (1e12 steps) never
// finishes within the test's CTest TIMEOUT, so it fails by the timeout, not
// by a wall-clock bound that a slow or loaded machine could miss.
TEST(TinyBpeTest, LongWordsAreNotQuadratic) {
  TinySpec spec;
  spec.merges = {{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}};
  auto tok = Tiny(spec);
  const std::string word(1000000, 'a');
  const std::vector<uint32_t> ids = EncodeOk(*tok, word);
  ASSERT_EQ(ids.size(), word.size() / 8);
  EXPECT_EQ(ids.front(), TinyId(spec, "aaaaaaaa"));
  EXPECT_EQ(ids.back(), TinyId(spec, "aaaaaaaa"));
}

// ---------------------------------------------------------------------------
// Malformed tokenizer.json: errors, never crashes.

absl::Status LoadText(const TempDir& dir, const std::string& content) {
  const std::string path = dir.Write("tokenizer.json", content);
  return BpeTokenizer::FromFile(path).status();
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& needle) {
  ASSERT_FALSE(status.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(needle), absl::string_view::npos) << status;
}

TEST(MalformedBpeTest, NotJson) {
  TempDir dir;
  ExpectError(LoadText(dir, "{\"model\": {"), absl::StatusCode::kDataLoss, "not valid JSON");
  ExpectError(LoadText(dir, ""), absl::StatusCode::kDataLoss, "not valid JSON");
  ExpectError(LoadText(dir, "\xFF\xFE garbage"), absl::StatusCode::kDataLoss, "tokenizer.json");
  ExpectError(LoadText(dir, "[1, 2, 3]"), absl::StatusCode::kInvalidArgument, "JSON object");
}

TEST(MalformedBpeTest, MissingOrBadVocab) {
  TempDir dir;
  json j = TinyJson(HelloSpec());
  j["model"].erase("vocab");
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.vocab is missing");
  j["model"]["vocab"] = json::array({"a", "b"});
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.vocab must be an object");
  j["model"]["vocab"] = {{"a", -1}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "non-negative integer");
  j["model"]["vocab"] = {{"a", "zero"}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.vocab['a']");
  j["model"]["vocab"] = {{"a", 1000000000000LL}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "maximum");
  j["model"]["vocab"] = {{"a", 0}, {"b", 0}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "more than one token");
  json no_model = TinyJson(HelloSpec());
  no_model.erase("model");
  ExpectError(LoadText(dir, no_model.dump()), absl::StatusCode::kInvalidArgument, "'model'");
}

TEST(MalformedBpeTest, BadMerges) {
  TempDir dir;
  json j = TinyJson(HelloSpec());
  j["model"]["merges"] = json::array({"h e", "nospace"});
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges[1]");
  j["model"]["merges"] = json::array({"a b c"});
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges[0]");
  j["model"]["merges"] = json::array({"h \xE2\x82\xAC"});  // "€" is not a token
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "not in model.vocab");
  j["model"]["merges"] = json::array({"x y"});  // both bytes exist, "xy" does not
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "'xy'");
  j["model"]["merges"] = json::array({42});
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges[0]");
  j["model"]["merges"] = json::array({json::array({"h"})});
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges[0]");
  j["model"]["merges"] = "h e";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges must be an array");
  j["model"].erase("merges");
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.merges is missing");
}

TEST(MalformedBpeTest, UnsupportedModelAndPipeline) {
  TempDir dir;
  json j = TinyJson(HelloSpec());
  j["model"]["type"] = "WordPiece";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "'WordPiece'");
  j = TinyJson(HelloSpec());
  j["model"]["type"] = 7;
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "model.type");
  j = TinyJson(HelloSpec());
  j["model"]["byte_fallback"] = true;
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "byte_fallback");
  j = TinyJson(HelloSpec());
  j["model"]["dropout"] = 0.1;
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "dropout");
  j = TinyJson(HelloSpec());
  j["normalizer"] = {{"type", "NFC"}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "NFC");
  j = TinyJson(HelloSpec());
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "'Whitespace'");
  j = TinyJson(HelloSpec());
  j.erase("pre_tokenizer");
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "ByteLevel");
  j = TinyJson(HelloSpec());
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "does not compile");
  j = TinyJson(HelloSpec());
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "Isolated");
  j = TinyJson(HelloSpec());
  j["decoder"] = {{"type", "Metaspace"}};
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "decoder");
  j = TinyJson(HelloSpec());
  j["added_tokens"][0].erase("content");
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "added_tokens[0].content");
  j = TinyJson(HelloSpec());
  j["added_tokens"][1]["id"] = "x";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "added_tokens[1].id");
  j = TinyJson(HelloSpec());
  j["model"]["unk_token"] = "<unk>";
  ExpectError(LoadText(dir, j.dump()), absl::StatusCode::kInvalidArgument, "unk_token");
}

TEST(MalformedBpeTest, MissingFileIsNotFoundWithThePath) {
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile("/nonexistent/dir/tokenizer.json");
  ExpectError(tok.status(), absl::StatusCode::kNotFound, "/nonexistent/dir/tokenizer.json");
  ModelConfig config;
  config.tokenizer = TokenizerType::kBpe;
  config.tokenizer_file = "tokenizer.json";
  absl::StatusOr<std::unique_ptr<Tokenizer>> made = MakeTokenizer(config, "/nonexistent/model");
  ExpectError(made.status(), absl::StatusCode::kNotFound, "/nonexistent/model/tokenizer.json");
}

// Defect 8 (issue 12): a 300k-deep value in tokenizer.json crashed the loader
// (recursive dump() in the error message), and 100,000 Split steps crashed the
// first Encode (one recursion per step).
TEST(MalformedBpeTest, DeepNestingIsRefusedBeforeParsing) {
  const size_t depth = 300000;
  json j = TinyJson(HelloSpec());
  std::string text = j.dump();
  // {"model": {"type": [[[...]]], ...}} spliced in as text: building it as a
  // json value would itself recurse.
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const std::string key = "\"version\":\"1.0\"";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, key.size(), "\"version\":" + deep);
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(text);
  ExpectError(tok.status(), absl::StatusCode::kInvalidArgument, "deeper than 64");
  EXPECT_LT(tok.status().message().size(), 200u);
  j = TinyJson(HelloSpec());
  j["model"]["type"] = json::array({json::array({json::array({1, 2, 3})})});
  ExpectError(BpeTokenizer::FromJson(j.dump()).status(), absl::StatusCode::kInvalidArgument, "model.type");
  // Brackets inside strings do not count.
  j = TinyJson(HelloSpec());
  j["model"]["vocab"][std::string(100, '[')] = 100000;
  EXPECT_TRUE(BpeTokenizer::FromJson(j.dump()).ok());
}

TEST(MalformedBpeTest, TooManyPreTokenizerStepsAreRefusedAtLoad) {
  json j = TinyJson(HelloSpec());
  json split = j["pre_tokenizer"]["pretokenizers"][0];
  split["pattern"] = {{"String", "q"}};
  json steps = json::array();
  for (int i = 0; i < 100000; ++i) steps.push_back(split);
  steps.push_back(j["pre_tokenizer"]["pretokenizers"][1]);
  j["pre_tokenizer"]["pretokenizers"] = steps;
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(j.dump());
  if (tok.ok()) (void)(*tok)->Encode("hello world");  // crashed here before the fix
  ExpectError(tok.status(), absl::StatusCode::kInvalidArgument, "100001 steps, at most 64");
  // 64 steps still load and encode.
  steps = json::array();
  for (int i = 0; i < 63; ++i) steps.push_back(split);
  steps.push_back(TinyJson(HelloSpec())["pre_tokenizer"]["pretokenizers"][1]);
  j["pre_tokenizer"]["pretokenizers"] = steps;
  tok = BpeTokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE((*tok)->Encode("hello world").ok());
}

// Ids index dense per-id arrays: one id of 2^24 - 1 used to cost 512 MB.
TEST(MalformedBpeTest, IdsAreBoundedByTheLargestVocabulary) {
  json j = TinyJson(HelloSpec());
  j["model"]["vocab"]["zz"] = 16777215;
  ExpectError(BpeTokenizer::FromJson(j.dump()).status(), absl::StatusCode::kInvalidArgument, "maximum");
  j = TinyJson(HelloSpec());
  j["added_tokens"][0]["id"] = 4194304;
  ExpectError(BpeTokenizer::FromJson(j.dump()).status(), absl::StatusCode::kInvalidArgument, "maximum");
  j = TinyJson(HelloSpec());
  j["model"]["vocab"][std::string(1 << 20, 'k')] = "zero";
  absl::Status s = BpeTokenizer::FromJson(j.dump()).status();
  ExpectError(s, absl::StatusCode::kInvalidArgument, "model.vocab['kkk");
  EXPECT_LT(s.message().size(), 200u);
}

TEST(MalformedBpeTest, ErrorsQuoteLongValuesBriefly) {
  json j = TinyJson(HelloSpec());
  j["model"]["type"] = std::string(1 << 20, 'W');
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(j.dump());
  ExpectError(tok.status(), absl::StatusCode::kInvalidArgument, "model.type");
  EXPECT_LT(tok.status().message().size(), 200u);
  j = TinyJson(HelloSpec());
  j["model"]["merges"] = json::array({json::array({std::string(1 << 20, 'x'), "y", "z"})});
  tok = BpeTokenizer::FromJson(j.dump());
  ExpectError(tok.status(), absl::StatusCode::kInvalidArgument, "model.merges[0]");
  EXPECT_LT(tok.status().message().size(), 200u);
  tok = BpeTokenizer::FromJson("{\"model\": \"" + std::string(1 << 20, 'x'));  // unterminated string
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_LT(tok.status().message().size(), 300u);
}

TEST(MalformedBpeTest, RandomCorruptionNeverCrashes) {
  const std::string good = TinyJson(HelloSpec()).dump();
  std::mt19937 rng(7);
  int loaded = 0, refused = 0, encoded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.erase(pos, 1 + rng() % 8);
          break;
        default:
          text.resize(pos);
          break;
      }
      if (text.empty()) break;
    }
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(text);
    if (!tok.ok()) {
      // A refusal says why, briefly, with a loader's code.
      ++refused;
      EXPECT_TRUE(tok.status().code() == absl::StatusCode::kInvalidArgument ||
                  tok.status().code() == absl::StatusCode::kDataLoss)
          << "trial " << trial << ": " << tok.status();
      EXPECT_FALSE(tok.status().message().empty()) << "trial " << trial;
      EXPECT_LT(tok.status().message().size(), 400u) << "trial " << trial;
      continue;
    }
    // A file that still loads is a valid tokenizer: whatever it encodes
    // is in its vocabulary and decodes back to the input.
    ++loaded;
    const BpeTokenizer& t = **tok;
    EXPECT_GT(t.vocab_size(), 0) << "trial " << trial;
    for (const std::string input : {"hello world", "hello world <|eot|> 123", "héllo\n\tzz"}) {
      absl::StatusOr<std::vector<uint32_t>> ids = t.Encode(input);
      if (!ids.ok()) continue;  // a byte the corrupted vocabulary lost
      ++encoded;
      for (uint32_t id : *ids) ASSERT_LT(id, static_cast<uint32_t>(t.vocab_size())) << "trial " << trial;
      absl::StatusOr<std::string> back = t.Decode(*ids, /*include_special=*/true);
      ASSERT_TRUE(back.ok()) << "trial " << trial << ": " << back.status();
      EXPECT_EQ(*back, input) << "trial " << trial;
    }
  }
  // Both outcomes happen at this seed: most corruptions are caught, some
  // leave a valid file (a changed digit, a dropped merge).
  EXPECT_EQ(loaded + refused, 300);
  EXPECT_GT(refused, 150) << loaded << " of 300 corrupted files still loaded";
  EXPECT_GT(loaded, 0);
  EXPECT_GT(encoded, 0);
}

// ---------------------------------------------------------------------------
// LLaMA-3: the real tokenizer.json, when fetched.

std::string LlamaPath() {
  if (const char* env = std::getenv("PDSERVE_LLAMA3_TOKENIZER_JSON"); env != nullptr && *env != '\0') return env;
  return std::string(PDSERVE_SOURCE_DIR) + "/.cache/tokenizers/llama3/tokenizer.json";
}

struct Reference {
  std::string text;
  std::vector<uint32_t> ids;
};

class LlamaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(LlamaPath())) return;
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromFile(LlamaPath());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(tok).value().release();
    std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/tests/data/llama3_encodings.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const json j = json::parse(line);
      refs_->push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<uint32_t>>()});
    }
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) {
      GTEST_SKIP() << "LLaMA-3 tokenizer.json not found at " << LlamaPath()
                   << "; run scripts/fetch_tokenizer.sh or set PDSERVE_LLAMA3_TOKENIZER_JSON";
    }
  }

  static BpeTokenizer* tok_;
  static std::vector<Reference>* refs_;
};

BpeTokenizer* LlamaTest::tok_ = nullptr;
std::vector<Reference>* LlamaTest::refs_ = new std::vector<Reference>();

TEST_F(LlamaTest, MatchesTheReferenceTokenForToken) {
  ASSERT_GE(refs_->size(), 300u) << "tests/data/llama3_encodings.jsonl is missing or short";
  int mismatches = 0;
  for (const Reference& ref : *refs_) {
    const std::vector<uint32_t> ids = EncodeOk(*tok_, ref.text);
    if (ids != ref.ids) {
      ++mismatches;
      ADD_FAILURE() << "encoding differs for " << json(ref.text).dump() << "\n  got  " << json(ids).dump()
                    << "\n  want " << json(ref.ids).dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << refs_->size() << " reference strings";
}

TEST_F(LlamaTest, DecodeOfEncodeIsTheText) {
  for (const Reference& ref : *refs_) {
    absl::StatusOr<std::string> text = tok_->Decode(ref.ids, /*include_special=*/true);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, ref.text);
  }
}

TEST_F(LlamaTest, StreamingDecodeEqualsFullDecode) {
  for (const Reference& ref : *refs_) {
    // Streams drop special tokens (they decode to ""), like Decode without
    // include_special.
    EXPECT_EQ(Stream(*tok_, ref.ids), *tok_->Decode(ref.ids)) << json(ref.text).dump();
  }
}

TEST_F(LlamaTest, SpecialTokens) {
  EXPECT_EQ(tok_->num_tokens(), 128256);
  EXPECT_EQ(tok_->AddedTokenId("<|begin_of_text|>"), 128000u);
  EXPECT_EQ(tok_->AddedTokenId("<|end_of_text|>"), 128001u);
  EXPECT_EQ(tok_->AddedTokenId("<|eot_id|>"), 128009u);
  EXPECT_TRUE(tok_->IsSpecial(128000));
  EXPECT_FALSE(tok_->IsSpecial(9906));
  EXPECT_EQ(tok_->DecodeToken(128000), "");
  EXPECT_EQ(EncodeOk(*tok_, "<|begin_of_text|>Hello"), (std::vector<uint32_t>{128000, 9906}));
  EXPECT_EQ(*tok_->Decode({128000, 9906}, true), "<|begin_of_text|>Hello");
  EXPECT_EQ(*tok_->Decode({128000, 9906}), "Hello");
  // Id 128256 is past the last token.
  EXPECT_EQ(tok_->Decode({128256}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok_->DecodeToken(128256), "");
}

TEST_F(LlamaTest, ModelWith128000IdsRejectsSpecialTokensInText) {
  ModelConfig config;  // the default: vocab 128000, bpe tokenizer.json
  config.tokenizer = TokenizerType::kBpe;
  config.tokenizer_file = fs::path(LlamaPath()).filename().string();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = MakeTokenizer(config, fs::path(LlamaPath()).parent_path().string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 128000);
  EXPECT_EQ(*(*tok)->Encode("Hello world"), (std::vector<uint32_t>{9906, 1917}));
  absl::StatusOr<std::vector<uint32_t>> ids = (*tok)->Encode("Hi<|eot_id|>");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("<|eot_id|>"), absl::string_view::npos) << ids.status();
}

// Ids from HuggingFace tokenizers itself (Rust, Oniguruma regex; checked
// with its npm binding `tokenizers` 0.23.2). Their \s is Unicode White_Space.
// transformers.js, which made the reference file, counts U+FEFF and not U+0085
// as \s, and PCRE2 alone would count U+180E; such strings are kept out of the
// reference file and pinned here instead.
TEST_F(LlamaTest, WhiteSpaceFollowsHuggingFaceWhereTheJsReferenceDiffers) {
  const std::vector<std::pair<std::string, std::vector<uint32_t>>> cases = {
      {"\xEF\xBB\xBF's", {3305, 6, 82}},                      // JS: 3305, 596
      {"_  \xEF\xBB\xBF", {62, 220, 76880}},                  // JS: 62, 256, 3305
      {"\xE3\x80\x80\xE3\x80\x80\xC2\x85", {44529, 116360}},  // JS: 23249, 23249, 116360
      {"e \xE1\xA0\x8E f", {68, 87189, 254, 236, 282}},       // JS agrees; raw PCRE2 \s would not
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(EncodeOk(*tok_, text), want) << json(text).dump();
}

TEST_F(LlamaTest, InvalidUtf8AndTruncatedFile) {
  absl::StatusOr<std::vector<uint32_t>> ids = tok_->Encode("Hello \xF0\x9F\x98");
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("byte 6"), absl::string_view::npos) << ids.status();
  // A download cut short.
  std::ifstream in(LlamaPath(), std::ios::binary);
  std::string head(200000, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  TempDir dir;
  ExpectError(LoadText(dir, head), absl::StatusCode::kDataLoss, "not valid JSON");
}

TEST_F(LlamaTest, LongRunsAndWords) {
  // Whitespace runs exercise the lookahead; a long letter run exercises BPE.
  for (const std::string& text :
       {std::string(100000, ' '), std::string(100000, '\n'), std::string(50000, 'a'), std::string(30000, '9')}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<uint32_t> ids = EncodeOk(*tok_, text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(*tok_->Decode(ids), text);
    EXPECT_LT(seconds, 1.0) << text.size() << " x '" << text[0] << "'";
  }
  // Many distinct long words (the per-call cache does not help here).
  std::mt19937 rng(3);
  std::string words;
  for (int w = 0; w < 200; ++w) {
    words += ' ';
    for (int c = 0; c < 500; ++c) words += static_cast<char>('a' + rng() % 26);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<uint32_t> ids = EncodeOk(*tok_, words);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_EQ(*tok_->Decode(ids), words);
}

// Deterministic English: sentences drawn from a fixed pool by a seeded RNG.
std::string EnglishText(size_t bytes) {
  const std::vector<std::string> pool = {
      "The committee met on Tuesday to review the budget for the coming year.",
      "She walked along the river, counting the boats that drifted past the old mill.",
      "In 1887, the railway reached the valley, and the town doubled in size within a decade.",
      "Nobody knew why the lighthouse keeper had stopped answering his letters.",
      "\"We'll need more time,\" he said, \"and probably a bigger boat.\"",
      "The results, summarised in Table 3, show a modest but consistent improvement.",
      "After the storm, the garden was a tangle of branches, leaves and broken glass.",
      "It isn't clear whether the new policy will reduce costs or simply move them elsewhere.",
      "Children played in the square while their parents argued about the price of bread.",
      "The manuscript, written in a careful hand, ran to more than four hundred pages.",
  };
  std::mt19937 rng(2024);
  std::string text;
  while (text.size() < bytes) {
    text += pool[rng() % pool.size()];
    text += (rng() % 5 == 0) ? "\n\n" : " ";
  }
  text.resize(bytes);
  return text;
}

TEST_F(LlamaTest, OneMegabyteOfEnglishUnderOneSecond) {
  const std::string text = EnglishText(1000000);
  double best = 1e9;
  size_t tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    tokens = EncodeOk(*tok_, text).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("1 MB English: %zu tokens, best of 3 %.3f s (%.1f MB/s)\n", tokens, best, 1.0 / best);
  EXPECT_LT(best, 1.0);
}

}  // namespace
}  // namespace pdserve
