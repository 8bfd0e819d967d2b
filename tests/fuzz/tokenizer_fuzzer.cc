// libFuzzer target: tokenizer.json loading and BPE encode of arbitrary bytes.
//
// The first input byte picks the mode (the rest is R):
//   0: R is a tokenizer.json: load it; if it loads, encode and decode a few
//      fixed strings with it;
//   1: R is text: encode it with a fixed, valid byte-level BPE
//      (tests/fuzz/data/tiny_tokenizer.json, LLaMA-3's pre-tokenizer) and
//      with the byte and char tokenizers;
//   2: R is "tokenizer.json \0 text": load, then encode the text.
// Properties beyond "no crash, no sanitizer report": when a text encodes,
// every id is below vocab_size, Decode(include_special) gives the text back
// (byte-level BPE is lossless; the fixed tokenizer strips no whitespace),
// and streaming the ids through IncrementalDetokenizer gives valid UTF-8
// equal to Decode(). Errors carry bounded messages.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/byte_tokenizer.h"
#include "common/tokenizer/char_tokenizer.h"
#include "common/tokenizer/incremental_detokenizer.h"

namespace {

using pdserve::BpeTokenizer;

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "tokenizer_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

void CheckError(const absl::Status& s) {
  if (s.message().size() > 600) Fail("unbounded error message", std::string(s.message()));
}

const BpeTokenizer& Fixed() {
  static const BpeTokenizer* tok = [] {
    std::ifstream in(PDSERVE_SOURCE_DIR "/tests/fuzz/data/tiny_tokenizer.json", std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::FromJson(buf.str());
    if (!t.ok()) Fail("the fixed tokenizer does not load", t.status().ToString());
    return t->release();
  }();
  return *tok;
}

// Encodes `text`; checks ids, the round trip (when `lossless`) and streaming.
void EncodeAndCheck(const BpeTokenizer& tok, const std::string& text, bool lossless) {
  absl::StatusOr<std::vector<uint32_t>> ids = tok.Encode(text);
  if (!ids.ok()) {
    CheckError(ids.status());
    return;
  }
  for (uint32_t id : *ids) {
    if (id >= tok.vocab_size()) Fail("id beyond vocab_size", text);
  }
  absl::StatusOr<std::string> with_special = tok.Decode(*ids, /*include_special=*/true);
  if (!with_special.ok()) Fail("Decode of Encode failed", with_special.status().ToString());
  if (lossless && *with_special != text) Fail("Decode(Encode(text)) != text", text + " -> " + *with_special);
  absl::StatusOr<std::string> plain = tok.Decode(*ids);
  if (!plain.ok()) Fail("Decode of Encode failed", plain.status().ToString());
  pdserve::IncrementalDetokenizer detok(&tok);
  std::string streamed;
  for (uint32_t id : *ids) streamed += detok.Push(id);
  streamed += detok.Flush();
  if (streamed != *plain) Fail("streamed decode differs from Decode", text);
}

void LoadAndEncode(const std::string& json, const std::string* text) {
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromJson(json);
  if (!tok.ok()) {
    CheckError(tok.status());
    return;
  }
  if (text != nullptr) {
    EncodeAndCheck(**tok, *text, /*lossless=*/false);
  } else {
    for (const char* s : {"hello world", " <|eot|> 12345 \xC3\xA9t\xC3\xA9\n\n", "", "   a  "}) {
      EncodeAndCheck(**tok, s, false);
    }
  }
  for (uint32_t id : {0u, 1u, 255u, 256u, 100000u, 0xFFFFFFFFu}) (void)(*tok)->DecodeToken(id);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Fixed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      LoadAndEncode(rest, nullptr);
      break;
    case 1: {
      EncodeAndCheck(Fixed(), rest, /*lossless=*/true);
      static const auto byte_tok = pdserve::ByteTokenizer::Create(300);
      static const auto char_tok = pdserve::CharTokenizer::Create(1000);
      for (const pdserve::Tokenizer* t : {static_cast<const pdserve::Tokenizer*>(byte_tok->get()),
                                          static_cast<const pdserve::Tokenizer*>(char_tok->get())}) {
        absl::StatusOr<std::vector<uint32_t>> ids = t->Encode(rest);
        if (!ids.ok()) {
          CheckError(ids.status());
          continue;
        }
        pdserve::IncrementalDetokenizer detok(t);
        for (uint32_t id : *ids) {
          if (id >= t->vocab_size()) Fail("id beyond vocab_size", rest);
          (void)detok.Push(id);
        }
        (void)detok.Flush();
      }
      break;
    }
    default: {
      const size_t cut = rest.find('\0');
      if (cut == std::string::npos) return 0;
      const std::string text = rest.substr(cut + 1);
      LoadAndEncode(rest.substr(0, cut), &text);
      break;
    }
  }
  return 0;
}
