// pdserve-passkey's trial records: the trial objects of --json-out, the
// lines of --trials-jsonl (the same objects, one per finished trial, after a
// header line that names the run), and reading that file back for --resume.
//
// The --trials-jsonl file:
//   {"pdserve_passkey_trials":1,"protocol":"seed","seed":0,"lengths":[...],
//    "max_new_tokens":16,"position":"start/middle/end by trial % 3","depth":null}
//   {"context_length":4096,"trial":0,...}      one line per finished trial
// A resumed run must have the header's protocol, seed, lengths,
// max_new_tokens and position (--n-trials may differ: more trials extend the
// run). A trial is identified by its length, index and passkey; its last line
// wins, and one that ended in an RPC error is run again.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/passkey/passkey_protocol.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// A trial as JSON: context_length, trial, prompt_tokens, usage_prompt_tokens,
// position, depth, filler_words, filler_words_before, passkey, answer_text,
// answer_token_ids, extracted, correct, ttft_ms, latency_ms, tokens,
// finish_reason, error, prompt (unknown values are null).
nlohmann::ordered_json PasskeyTrialJson(const PasskeyTrial& t);

// The inverse, for a done trial: InvalidArgument naming the field that is
// missing or of the wrong type.
absl::StatusOr<PasskeyTrial> ParsePasskeyTrialJson(const nlohmann::json& j);

// The header line (no newline) of a --trials-jsonl file.
std::string PasskeyTrialsHeader(const PasskeyRunSpec& spec);

// FailedPrecondition naming the field, the file's value and this run's when
// `header` (a parsed header line) was written for another run;
// InvalidArgument when it is no header at all.
absl::Status CheckPasskeyTrialsHeader(const nlohmann::json& header, const PasskeyRunSpec& spec);

// A --trials-jsonl file's content, parsed.
struct PasskeyTrialsFile {
  std::vector<PasskeyTrial> records;  // in file order
  size_t complete_bytes = 0;          // up to the last newline: a killed writer's partial line is dropped
};

// Parses `content` (header checked against `spec`, then one trial per line).
// Empty content is an empty file. InvalidArgument "line N: ..." for a
// complete line that does not parse; the header check's error as is.
absl::StatusOr<PasskeyTrialsFile> ParsePasskeyTrialsJsonl(absl::string_view content, const PasskeyRunSpec& spec);

// What --resume did to the planned trials.
struct PasskeyResumeCount {
  int64_t resumed = 0;      // done trials taken from the file
  int64_t failed_again = 0; // recorded with an RPC error: run again
  int64_t outside = 0;      // records of trials this run does not plan (fewer --n-trials)
};

// Marks every planned trial with a record as done and takes its outcome from
// the record (the last one of the trial wins; one that failed is left to run
// again). FailedPrecondition, naming the trial and both values, when a
// record's passkey or prompt differs from the planned one (another seed, or
// another tokenizer sized the prompts).
absl::StatusOr<PasskeyResumeCount> ApplyResumedTrials(const std::vector<PasskeyTrial>& records,
                                                      std::vector<PasskeyTrial>* planned);

// --resume's read of a --trials-jsonl file: ParsePasskeyTrialsJsonl of its
// content; a missing or empty file is an empty one. Errors name the path.
absl::StatusOr<PasskeyTrialsFile> ReadPasskeyTrialsFile(const std::string& path, const PasskeyRunSpec& spec);

// Without --resume: FailedPrecondition when `path` exists and is not empty
// (appending would mix two runs; overwriting would lose one).
absl::Status CheckNewPasskeyTrialsFile(const std::string& path);

// Appends trials to a --trials-jsonl file, one flushed line each.
class PasskeyTrialsWriter {
 public:
  // Opens `path` after its first `keep_bytes` bytes (ReadPasskeyTrialsFile's
  // complete_bytes: a partial last line is cut off) to append to them; with
  // keep_bytes 0 the file is created anew with the header. IO errors name
  // the path.
  static absl::StatusOr<std::unique_ptr<PasskeyTrialsWriter>> Open(const std::string& path,
                                                                   const PasskeyRunSpec& spec, size_t keep_bytes);
  ~PasskeyTrialsWriter();
  PasskeyTrialsWriter(const PasskeyTrialsWriter&) = delete;
  PasskeyTrialsWriter& operator=(const PasskeyTrialsWriter&) = delete;

  // One line, written and flushed; safe from several threads.
  absl::Status Append(const PasskeyTrial& trial);

 private:
  PasskeyTrialsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteLine(const std::string& line);  // with mu_ held, or before sharing

  const std::string path_;
  std::mutex mu_;
  std::FILE* file_;
};

}  // namespace pdserve
