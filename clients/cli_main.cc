// pdserve-cli: a small client of the public API (pdserve.v1.Generator).
// Sends one prompt to the router and streams the generated text to stdout as
// it arrives; with --json prints one JSON object at the end instead.
// Uses only the public proto, never the internal ones.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/net/server.h"
#include "absl/strings/str_cat.h"
#include "common/cli/cli_util.h"
#include "common/cli/finish_reason.h"
#include "common/cli/usage_json.h"
#include "common/net/grpc_security.h"
#include "common/net/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/generate.grpc.pb.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051", "The router's address, host:port.");
ABSL_FLAG(std::string, prompt, "", "The prompt as text (exactly one of --prompt and --prompt-ids).");
ABSL_FLAG(std::string, prompt_ids, "", "The prompt as token ids, comma-separated: 1,2,3.");
ABSL_FLAG(int64_t, max_new_tokens, 32, "Tokens to generate (>= 1; the router has a cap).");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; <= 0 is greedy.");
ABSL_FLAG(float, top_p, 0.0f, "Nucleus mass in (0, 1]; 0 means 1 (keep all).");
ABSL_FLAG(int64_t, top_k, 0, "Keep the k most likely tokens; 0 keeps all.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed (counter-based: u(seed, n)).");
ABSL_FLAG(std::string, stop, "",
          "Stop sequences as ONE comma-separated list (give the flag once): --stop='###,\\n\\n'. "
          "Escapes: \\, is a literal comma, \\\\ a backslash, \\n newline, \\t tab.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past the model's eos_token_id.");
ABSL_FLAG(int64_t, deadline_ms, 0, "Deadline of the whole call in ms; 0 = none.");
ABSL_FLAG(std::string, request_id, "", "Optional request id; the router assigns one when empty.");
ABSL_FLAG(bool, json, false,
          "Print one JSON object at the end ({\"token_ids\", \"text\", \"finish_reason\", \"usage\", "
          "\"request_id\"}) instead of streaming text.");

namespace {

using pdserve::Die;

// Splits the --stop list on unescaped commas and resolves the escapes.
std::vector<std::string> ParseStopList(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c == '\\') {
      if (i + 1 == text.size()) Die("--stop: a trailing backslash escapes nothing (use \\\\)", 2);
      const char e = text[++i];
      switch (e) {
        case ',': cur += ','; break;
        case '\\': cur += '\\'; break;
        case 'n': cur += '\n'; break;
        case 't': cur += '\t'; break;
        default: Die(absl::StrCat("--stop: unknown escape '\\", std::string(1, e), "' (use \\, \\\\ \\n \\t)"), 2);
      }
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  for (const std::string& s : out) {
    if (s.empty()) Die("--stop: empty stop sequence (check for a stray comma)", 2);
  }
  return out;
}

// abseil keeps only the last of a repeated flag; say so rather than silently
// dropping stop sequences.
void RejectRepeatedStop(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    while (*a == '-') ++a;
    if (a == argv[i]) continue;
    if (std::strcmp(a, "stop") == 0 || std::strncmp(a, "stop=", 5) == 0) ++n;
  }
  if (n > 1) Die("--stop was given more than once; give one comma-separated list (\\, is a literal comma)", 2);
}

double Ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// The request from the flags: the prompt as text or ids, and the sampling
// parameters. Only checks the proto cannot express or that are fixed by the
// API; the router owns the rest (its cap on max_new_tokens, top_p in (0, 1],
// ...). Bad flags exit 2.
pdserve::v1::GenerateRequest BuildRequest() {
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::string prompt_ids = absl::GetFlag(FLAGS_prompt_ids);
  if (prompt.empty() == prompt_ids.empty()) Die("give exactly one of --prompt TEXT and --prompt-ids 1,2,3", 2);

  pdserve::v1::GenerateRequest req;
  req.set_request_id(absl::GetFlag(FLAGS_request_id));
  if (!prompt.empty()) {
    req.set_text(prompt);
  } else {
    auto ids = pdserve::ParseIdList(prompt_ids);
    if (!ids.ok()) Die("--prompt-ids: " + std::string(ids.status().message()), 2);
    if (ids->empty()) Die("--prompt-ids needs at least one id", 2);
    for (int64_t id : *ids) {
      if (id > std::numeric_limits<uint32_t>::max()) Die(absl::StrCat("--prompt-ids: ", id, " does not fit in uint32"), 2);
      req.add_token_ids(static_cast<uint32_t>(id));
    }
  }

  const int64_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  const int64_t top_k = absl::GetFlag(FLAGS_top_k);
  constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();
  if (max_new < 1 || max_new > kU32Max) Die("--max-new-tokens must be in [1, 2^32)", 2);
  if (top_k < 0 || top_k > kU32Max) Die("--top-k must be in [0, 2^32)", 2);
  if (absl::GetFlag(FLAGS_deadline_ms) < 0) Die("--deadline-ms must be >= 0 (0 = no deadline)", 2);

  pdserve::v1::SamplingParams* s = req.mutable_sampling();
  s->set_max_new_tokens(static_cast<uint32_t>(max_new));
  s->set_temperature(absl::GetFlag(FLAGS_temperature));
  s->set_top_p(absl::GetFlag(FLAGS_top_p));
  s->set_top_k(static_cast<uint32_t>(top_k));
  s->set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& stop : ParseStopList(absl::GetFlag(FLAGS_stop))) s->add_stop(stop);
  s->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  return req;
}

// What the stream delivered.
struct StreamResult {
  std::vector<uint32_t> token_ids;
  std::string text;
  pdserve::v1::GenerateResponse last;  // the last message (finish reason, usage)
  bool got_any = false;
};

// Runs the call, streaming text to stdout unless `json`. An RPC error exits 1.
StreamResult StreamGenerate(const pdserve::v1::GenerateRequest& req, bool json) {
  const bool tty = !json && isatty(fileno(stdout));
  const int64_t deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  auto security = pdserve::ClientSecurityFromFlags();  // --tls-ca, --api-key
  if (!security.ok()) pdserve::Die(security.status(), 2);
  auto channel = pdserve::MakeChannel(absl::GetFlag(FLAGS_router), *security);
  auto stub = pdserve::v1::Generator::NewStub(channel);
  grpc::ClientContext ctx;
  if (deadline_ms > 0) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));

  StreamResult out;
  pdserve::v1::GenerateResponse resp;
  std::unique_ptr<grpc::ClientReader<pdserve::v1::GenerateResponse>> reader = stub->Generate(&ctx, req);
  while (reader->Read(&resp)) {
    out.token_ids.insert(out.token_ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    out.text += resp.text();
    if (!json && !resp.text().empty()) {
      std::fwrite(resp.text().data(), 1, resp.text().size(), stdout);
      std::fflush(stdout);
    }
    out.last = resp;
    out.got_any = true;
  }
  const grpc::Status status = reader->Finish();
  // On a terminal, end the streamed text with a newline so the prompt (or the
  // error) starts on its own line; piped output is exactly the generated text.
  if (tty && !out.text.empty() && out.text.back() != '\n') {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!status.ok()) {
    Die(absl::StrCat(pdserve::GrpcCodeName(status.error_code()), ": ", status.error_message()), 1);
  }
  return out;
}

// --json: one object on stdout.
void PrintJson(const StreamResult& r) {
  const pdserve::v1::GenerateResponse& last = r.last;
  nlohmann::ordered_json j = {
      {"token_ids", r.token_ids},
      {"text", r.text},
      {"finish_reason", pdserve::FinishReasonName(last.finish_reason())},
      {"usage", last.has_usage() ? pdserve::UsageToJson(last.usage()) : nlohmann::ordered_json(nullptr)},
      {"request_id", last.request_id()},
  };
  // The router sends whole UTF-8 characters; replace rather than throw if not.
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

// The one-line summary on stderr.
void PrintSummary(const pdserve::v1::GenerateResponse& last) {
  const pdserve::v1::Usage& u = last.usage();
  std::fprintf(stderr,
               "finish=%s prompt_tokens=%u generated_tokens=%u ttft_ms=%.3f tpot_ms=%.3f e2e_ms=%.3f "
               "kv_handoff_bytes=%llu kv_handoff_ms=%.3f (exposed %.3f) workers=%s->%s request_id=%s\n",
               pdserve::FinishReasonName(last.finish_reason()).c_str(), u.prompt_tokens(), u.generated_tokens(),
               Ms(u.ttft_ns()), Ms(u.tpot_ns()), Ms(u.e2e_ns()), static_cast<unsigned long long>(u.kv_handoff_bytes()),
               Ms(u.kv_handoff_ns()), Ms(u.kv_handoff_exposed_ns()), u.prefill_worker().empty() ? "?" : u.prefill_worker().c_str(),
               u.decode_worker().empty() ? "?" : u.decode_worker().c_str(), last.request_id().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::InitCli(
      argc, argv,
      "Sends one prompt to a pdserve router and streams the generated text to stdout.\n"
      "Usage: pdserve-cli [--router HOST:PORT] (--prompt TEXT | --prompt-ids 1,2,3)\n"
      "       [--max-new-tokens N] [--temperature T --top-p P --top-k K --seed S]\n"
      "       [--stop 'A,B'] [--ignore-eos] [--deadline-ms MS] [--json]\n"
      "A one-line summary (finish reason, tokens, TTFT, TPOT, hand-off, workers) goes to stderr.\n"
      "On an RPC error: 'pdserve-cli: error: CODE: message' and exit 1; bad flags exit 2.");
  RejectRepeatedStop(argc, argv);

  const pdserve::v1::GenerateRequest req = BuildRequest();
  const bool json = absl::GetFlag(FLAGS_json);
  const StreamResult r = StreamGenerate(req, json);
  if (!r.got_any || r.last.finish_reason() == pdserve::v1::FINISH_REASON_UNSPECIFIED) {
    std::fprintf(stderr, "pdserve-cli: warning: the stream ended without a finish reason\n");
  }
  if (json) {
    PrintJson(r);
  } else {
    PrintSummary(r.last);
  }
  return 0;
}
