// pdserve-tokenize: the model's tokenizer from the command line, to debug
// prompts and to check the tokenizer from outside. Text on stdin -> ids;
// --decode: ids on stdin -> text; --bench: encode throughput.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli/cli_util.h"
#include "common/model/config.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "Model directory: its config.json picks the tokenizer (byte, char or bpe).");
ABSL_FLAG(std::string, tokenizer_json, "", "A HuggingFace tokenizer.json (byte-level BPE), instead of --model.");
ABSL_FLAG(bool, decode, false,
          "Read token ids (a JSON array, {\"ids\": [...]}, or comma/space separated) and print the text.");
ABSL_FLAG(bool, skip_special, false, "With --decode (BPE): drop special tokens instead of printing their text.");
ABSL_FLAG(int32_t, bench, 0, "Encode stdin this many times and print the throughput (MB/s, tokens/s) as JSON.");

namespace pdserve {
namespace {

std::string ReadStdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Accepts the encoder's own output ({"ids": [...]}), a JSON array, or ids
// separated by commas and/or whitespace.
absl::StatusOr<std::vector<uint32_t>> ParseIds(const std::string& input) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(input);
  std::vector<uint32_t> ids;
  auto add = [&ids](uint64_t value, absl::string_view shown) -> absl::Status {
    if (value > UINT32_MAX) return absl::InvalidArgumentError(absl::StrCat("token id ", shown, " is too large"));
    ids.push_back(static_cast<uint32_t>(value));
    return absl::OkStatus();
  };
  if (!trimmed.empty() && (trimmed.front() == '[' || trimmed.front() == '{')) {
    nlohmann::json j = nlohmann::json::parse(trimmed.begin(), trimmed.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError("input starts like JSON but does not parse");
    if (j.is_object()) {
      if (!j.contains("ids")) return absl::InvalidArgumentError("JSON object input needs an \"ids\" array");
      j = j["ids"];
    }
    if (!j.is_array()) return absl::InvalidArgumentError("expected a JSON array of token ids");
    for (const nlohmann::json& v : j) {
      if (!v.is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat(v.dump(), " is not a token id (a non-negative integer)"));
      }
      if (absl::Status s = add(v.get<uint64_t>(), v.dump()); !s.ok()) return s;
    }
    return ids;
  }
  for (absl::string_view item : absl::StrSplit(trimmed, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a token id (a non-negative integer)"));
    }
    if (absl::Status s = add(value, item); !s.ok()) return s;
  }
  return ids;
}

absl::StatusOr<std::string> DecodeIds(const Tokenizer& tok, const std::vector<uint32_t>& ids, bool include_special) {
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) return bpe->Decode(ids, include_special);
  IncrementalDetokenizer detok(&tok);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= tok.vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i, " is not below vocab_size ", tok.vocab_size()));
    }
    text += detok.Push(ids[i]);
  }
  return text + detok.Flush();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model, const std::string& tokenizer_json) {
  if (model.empty() == tokenizer_json.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model DIR and --tokenizer-json FILE");
  }
  if (!tokenizer_json.empty()) {
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe = BpeTokenizer::FromFile(tokenizer_json);
    if (!bpe.ok()) return bpe.status();
    return std::unique_ptr<Tokenizer>(std::move(bpe).value());
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model + "/config.json");
  if (!config.ok()) return config.status();
  return MakeTokenizer(*config, model);
}

int Run() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
      Load(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_tokenizer_json));
  if (!tok.ok()) Die(tok.status(), tok.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  const std::string input = ReadStdin();

  if (absl::GetFlag(FLAGS_decode)) {
    absl::StatusOr<std::vector<uint32_t>> ids = ParseIds(input);
    if (!ids.ok()) Die(ids.status());
    absl::StatusOr<std::string> text = DecodeIds(**tok, *ids, !absl::GetFlag(FLAGS_skip_special));
    if (!text.ok()) Die(text.status());
    // Exactly the decoded text, no newline added: decode(encode(f)) == f.
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }

  const int32_t iterations = absl::GetFlag(FLAGS_bench);
  if (iterations < 0) Die("--bench must be >= 0", 2);
  if (iterations > 0) {
    using Clock = std::chrono::steady_clock;
    size_t tokens = 0;
    double total = 0, best = 1e300;
    for (int32_t i = 0; i < iterations; ++i) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<std::vector<uint32_t>> ids = (*tok)->Encode(input);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (!ids.ok()) Die(ids.status());
      tokens = ids->size();
      total += seconds;
      best = std::min(best, seconds);
    }
    const double mean = total / iterations;
    const double mb = static_cast<double>(input.size()) / 1e6;
    nlohmann::json j = {
        {"bytes", input.size()}, {"tokens", tokens},      {"iterations", iterations},      {"mean_seconds", mean},
        {"best_seconds", best},  {"mb_per_s", mb / mean}, {"tokens_per_s", tokens / mean}, {"best_mb_per_s", mb / best},
    };
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  absl::StatusOr<std::vector<uint32_t>> ids = (*tok)->Encode(input);
  if (!ids.ok()) Die(ids.status());
  std::string out = "{\"ids\": [";
  for (size_t i = 0; i < ids->size(); ++i) absl::StrAppend(&out, i ? ", " : "", (*ids)[i]);
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  pdserve::InitCli(argc, argv,
                   "Tokenizes stdin with a model's tokenizer and prints {\"ids\": [...]}; the text is taken\n"
                   "byte for byte (use printf or echo -n to avoid a trailing newline).\n"
                   "Usage: pdserve-tokenize (--model DIR | --tokenizer-json FILE) [--decode [--skip-special]] "
                   "[--bench N] < input");
  return pdserve::Run();
}
