#include "common/passkey/passkey_trials.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pdserve {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kHeaderKey = "pdserve_passkey_trials";
constexpr int kHeaderVersion = 1;

// The JSON type a field must have; every one may also be null when nullable.
enum class Kind { kInt, kNumber, kString, kBool, kIdArray };
struct FieldSpec {
  const char* name;
  Kind kind;
  bool nullable;
};

constexpr FieldSpec kTrialFields[] = {
    {"context_length", Kind::kInt, false}, {"trial", Kind::kInt, false},
    {"prompt_tokens", Kind::kInt, true},   {"usage_prompt_tokens", Kind::kInt, true},
    {"position", Kind::kString, false},    {"depth", Kind::kNumber, false},
    {"filler_words", Kind::kInt, false},   {"filler_words_before", Kind::kInt, false},
    {"passkey", Kind::kString, false},     {"answer_text", Kind::kString, false},
    {"answer_token_ids", Kind::kIdArray, false}, {"extracted", Kind::kString, true},
    {"correct", Kind::kBool, false},       {"ttft_ms", Kind::kNumber, true},
    {"latency_ms", Kind::kNumber, false},  {"tokens", Kind::kInt, false},
    {"finish_reason", Kind::kString, true}, {"error", Kind::kString, true},
    {"prompt", Kind::kString, false},
};

bool HasKind(const json& v, Kind kind) {
  switch (kind) {
    case Kind::kInt: return v.is_number_integer();
    case Kind::kNumber: return v.is_number();
    case Kind::kString: return v.is_string();
    case Kind::kBool: return v.is_boolean();
    case Kind::kIdArray:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_unsigned(); });
  }
  return false;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kInt: return "an integer";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kBool: return "true or false";
    case Kind::kIdArray: return "an array of token ids";
  }
  return "?";
}

// InvalidArgument naming the first field that is missing or of another type.
template <size_t N>
absl::Status CheckFields(const json& j, const FieldSpec (&fields)[N], absl::string_view what) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a JSON object"));
  for (const FieldSpec& f : fields) {
    const auto it = j.find(f.name);
    if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat(what, " has no \"", f.name, "\""));
    if (!(HasKind(*it, f.kind) || (f.nullable && it->is_null()))) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"", f.name, "\" is not ", KindName(f.kind),
                                                     f.nullable ? " or null" : "", ": ", it->dump()));
    }
  }
  return absl::OkStatus();
}

int64_t IntOr(const json& v, int64_t fallback) { return v.is_null() ? fallback : v.get<int64_t>(); }
std::string StringOr(const json& v) { return v.is_null() ? std::string() : v.get<std::string>(); }

ordered_json NullIfEmpty(const std::string& s) { return s.empty() ? ordered_json(nullptr) : ordered_json(s); }

}  // namespace

nlohmann::ordered_json PasskeyTrialJson(const PasskeyTrial& t) {
  auto opt_num = [](int64_t v) { return v >= 0 ? ordered_json(v) : ordered_json(nullptr); };
  return {{"context_length", t.context_length},
          {"trial", t.index},
          {"prompt_tokens", opt_num(t.prompt_tokens)},
          {"usage_prompt_tokens", opt_num(t.usage_prompt_tokens)},
          {"position", t.position.name},
          {"depth", t.position.depth},
          {"filler_words", t.prompt.filler_words},
          {"filler_words_before", t.prompt.filler_words_before},
          {"passkey", t.passkey},
          {"answer_text", t.answer},
          {"answer_token_ids", t.answer_ids},
          {"extracted", t.extracted ? ordered_json(*t.extracted) : ordered_json(nullptr)},
          {"correct", t.correct},
          {"ttft_ms", t.ttft_ms ? ordered_json(*t.ttft_ms) : ordered_json(nullptr)},
          {"latency_ms", t.latency_ms},
          {"tokens", t.tokens},
          {"finish_reason", NullIfEmpty(t.finish_reason)},
          {"error", t.failed ? ordered_json(t.error) : ordered_json(nullptr)},
          {"prompt", t.prompt.text}};
}

absl::StatusOr<PasskeyTrial> ParsePasskeyTrialJson(const nlohmann::json& j) {
  if (absl::Status s = CheckFields(j, kTrialFields, "the trial"); !s.ok()) return s;
  PasskeyTrial t;
  t.context_length = j["context_length"].get<int64_t>();
  t.index = j["trial"].get<int>();
  t.prompt_tokens = IntOr(j["prompt_tokens"], -1);
  t.usage_prompt_tokens = IntOr(j["usage_prompt_tokens"], -1);
  t.position = PasskeyPosition{j["position"].get<std::string>(), j["depth"].get<double>()};
  t.prompt.text = j["prompt"].get<std::string>();
  t.prompt.filler_words = j["filler_words"].get<int64_t>();
  t.prompt.filler_words_before = j["filler_words_before"].get<int64_t>();
  t.passkey = j["passkey"].get<std::string>();
  t.answer = j["answer_text"].get<std::string>();
  t.answer_ids = j["answer_token_ids"].get<std::vector<uint32_t>>();
  if (!j["extracted"].is_null()) t.extracted = j["extracted"].get<std::string>();
  t.correct = j["correct"].get<bool>();
  if (!j["ttft_ms"].is_null()) t.ttft_ms = j["ttft_ms"].get<double>();
  t.latency_ms = j["latency_ms"].get<double>();
  t.tokens = j["tokens"].get<int64_t>();
  t.finish_reason = StringOr(j["finish_reason"]);
  t.failed = !j["error"].is_null();
  t.error = StringOr(j["error"]);
  t.done = true;
  return t;
}

std::string PasskeyTrialsHeader(const PasskeyRunSpec& spec) {
  const bool seed = spec.protocol == PasskeyProtocol::kSeed;
  ordered_json j = {{kHeaderKey, kHeaderVersion},
                    {"protocol", PasskeyProtocolName(spec.protocol)},
                    {"seed", spec.seed},
                    {"lengths", spec.lengths},
                    {"max_new_tokens", spec.max_new_tokens},
                    {"position", PasskeyPositionsName(spec)},
                    {"depth", seed ? ordered_json(nullptr) : ordered_json(spec.position.depth)}};
  return j.dump();
}

absl::Status CheckPasskeyTrialsHeader(const nlohmann::json& header, const PasskeyRunSpec& spec) {
  const bool is_header = header.is_object() && header.contains(kHeaderKey) &&
                         header[kHeaderKey].is_number_integer() && header[kHeaderKey].get<int64_t>() == kHeaderVersion;
  if (!is_header) {
    return absl::InvalidArgumentError(absl::StrCat("the first line is not a pdserve-passkey trials header (version ",
                                                   kHeaderVersion, "): ", header.dump().substr(0, 200)));
  }
  const json want = json::parse(PasskeyTrialsHeader(spec));
  // The flag that sets each field, for the message.
  const std::pair<const char*, const char*> fields[] = {
      {"protocol", "--protocol"}, {"seed", "--seed"}, {"lengths", "--context-lengths"},
      {"max_new_tokens", "--max-new-tokens"}, {"position", "--position"}, {"depth", "--position"}};
  for (const auto& [key, flag] : fields) {
    const json got = header.contains(key) ? header[key] : json(nullptr);
    if (got != want[key]) {
      return absl::FailedPreconditionError(absl::StrCat("it was written by a run with ", key, " ", got.dump(),
                                                        ", this run has ", want[key].dump(), " (", flag,
                                                        "): its trials are not this run's"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PasskeyTrialsFile> ParsePasskeyTrialsJsonl(absl::string_view content, const PasskeyRunSpec& spec) {
  PasskeyTrialsFile out;
  const size_t last_newline = content.rfind('\n');
  out.complete_bytes = last_newline == absl::string_view::npos ? 0 : last_newline + 1;
  size_t pos = 0;
  int64_t line_number = 0;
  while (pos < out.complete_bytes) {
    const size_t end = content.find('\n', pos);
    const absl::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("line ", line_number, " is not JSON"));
    if (line_number == 1) {
      if (absl::Status s = CheckPasskeyTrialsHeader(j, spec); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<PasskeyTrial> t = ParsePasskeyTrialJson(j);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", t.status().message()));
    out.records.push_back(*std::move(t));
  }
  return out;
}

namespace {

// Takes the record's outcome into the planned trial.
void TakeOutcome(const PasskeyTrial& record, PasskeyTrial& t) {
  t.prompt_tokens = record.prompt_tokens;
  t.usage_prompt_tokens = record.usage_prompt_tokens;
  t.answer = record.answer;
  t.answer_ids = record.answer_ids;
  t.extracted = record.extracted;
  t.correct = record.correct;
  t.failed = record.failed;
  t.error = record.error;
  t.ttft_ms = record.ttft_ms;
  t.latency_ms = record.latency_ms;
  t.tokens = record.tokens;
  t.finish_reason = record.finish_reason;
  t.done = true;
  t.resumed = true;
}

}  // namespace

absl::StatusOr<PasskeyResumeCount> ApplyResumedTrials(const std::vector<PasskeyTrial>& records,
                                                      std::vector<PasskeyTrial>* planned) {
  std::map<std::pair<int64_t, int>, const PasskeyTrial*> last;  // (length, index) -> its last record
  for (const PasskeyTrial& r : records) last[{r.context_length, r.index}] = &r;
  PasskeyResumeCount count;
  std::set<std::pair<int64_t, int>> used;
  for (PasskeyTrial& t : *planned) {
    const auto it = last.find({t.context_length, t.index});
    if (it == last.end()) continue;
    used.insert(it->first);
    const PasskeyTrial& r = *it->second;
    const std::string which = absl::StrCat("trial ", t.index, " at ", t.context_length, " tokens");
    if (r.passkey != t.passkey) {
      return absl::FailedPreconditionError(absl::StrCat(which, " has passkey ", r.passkey, " in the file, ",
                                                        t.passkey, " in this run"));
    }
    if (r.prompt.text != t.prompt.text) {
      return absl::FailedPreconditionError(absl::StrCat(
          which, " has another prompt in the file (", r.prompt.text.size(), " bytes, ", r.prompt.filler_words,
          " filler words) than in this run (", t.prompt.text.size(), " bytes, ", t.prompt.filler_words,
          " filler words): another model or tokenizer sized it"));
    }
    if (r.failed) {
      ++count.failed_again;
      continue;
    }
    TakeOutcome(r, t);
    ++count.resumed;
  }
  count.outside = static_cast<int64_t>(last.size() - used.size());
  return count;
}

absl::StatusOr<PasskeyTrialsFile> ReadPasskeyTrialsFile(const std::string& path, const PasskeyRunSpec& spec) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return PasskeyTrialsFile{};
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  absl::StatusOr<PasskeyTrialsFile> parsed = ParsePasskeyTrialsJsonl(content.str(), spec);
  if (!parsed.ok()) return absl::Status(parsed.status().code(), absl::StrCat(path, ": ", parsed.status().message()));
  return parsed;
}

absl::Status CheckNewPasskeyTrialsFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::exists(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
  if (size > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " exists (", size, " bytes): pass --resume to continue the run it holds, or remove it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PasskeyTrialsWriter>> PasskeyTrialsWriter::Open(const std::string& path,
                                                                               const PasskeyRunSpec& spec,
                                                                               size_t keep_bytes) {
  if (keep_bytes > 0) {
    // A writer killed mid-line left a partial last line: cut it off so the
    // next line starts on its own.
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > keep_bytes && !ec) std::filesystem::resize_file(path, keep_bytes, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot cut ", path, " to ", keep_bytes, " bytes: ",
                                                           ec.message()));
  }
  std::FILE* f = std::fopen(path.c_str(), keep_bytes > 0 ? "a" : "w");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  std::unique_ptr<PasskeyTrialsWriter> w(new PasskeyTrialsWriter(path, f));
  if (keep_bytes == 0) {
    if (absl::Status s = w->WriteLine(PasskeyTrialsHeader(spec)); !s.ok()) return s;
  }
  return w;
}

PasskeyTrialsWriter::~PasskeyTrialsWriter() { std::fclose(file_); }

absl::Status PasskeyTrialsWriter::WriteLine(const std::string& line) {
  const std::string out = line + "\n";  // one write: a kill leaves at most one partial line
  if (std::fwrite(out.data(), 1, out.size(), file_) != out.size() || std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("cannot write to ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status PasskeyTrialsWriter::Append(const PasskeyTrial& trial) {
  // The router sends whole UTF-8 characters; replace rather than throw if not.
  const std::string line = PasskeyTrialJson(trial).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(mu_);
  return WriteLine(line);
}

}  // namespace pdserve
