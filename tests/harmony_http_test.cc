// A harmony model's /v1/chat/completions through the real code path: the
// OpenAI HTTP front (OpenAiHttpServer) on the in-process channel of a real
// RouterService, whose decode worker is a fake that streams a scripted id
// sequence, one id a message (random weights never write harmony). Prompts
// are prefilled on the decode worker (local_prefill_max_tokens), so the
// prefill worker (tests/fake_worker.h) is only polled. Checks: the rendered
// prompt reaches the worker; analysis becomes reasoning_content and final
// content, whole and streamed; <|return|> and <|call|> end the stream at
// the router, which cancels the decode call; ignore_eos goes past them;
// tools are a 400 naming the field. Needs the gpt-oss tokenizer.json
// (skips without it, as gptoss_tokenizer_test does).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net/httplib_config.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "fake_worker.h"
#include "nlohmann/json.hpp"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "router/openai_http.h"
#include "router/router_service.h"
#include "tests/gptoss_test_util.h"

namespace pdserve {
namespace {

using internal::v1::DecodeRequest;
using internal::v1::DecodeResponse;
using json = nlohmann::json;

using ::pdserve::testing::GptOssPath;
using ::pdserve::testing::kGptOssMissing;
using ::pdserve::testing::kGptOssVocabSize;

// Admits, then streams the script one id a message; the last message
// carries `finish`, or, with `hold`, the stream stays open after the
// script until the router cancels it (a worker that would go on).
class ScriptedDecode final : public internal::v1::DecodeWorker::Service {
 public:
  void Set(std::vector<uint32_t> ids, pdserve::v1::FinishReason finish, bool hold) {
    absl::MutexLock lock(&mu_);
    ids_ = std::move(ids);
    finish_ = finish;
    hold_ = hold;
    cancelled_ = false;
  }
  grpc::Status Decode(grpc::ServerContext* ctx, const DecodeRequest* req,
                      grpc::ServerWriter<DecodeResponse>* writer) override {
    std::vector<uint32_t> ids;
    pdserve::v1::FinishReason finish;
    bool hold;
    {
      absl::MutexLock lock(&mu_);
      prompt_.assign(req->prompt_token_ids().begin(), req->prompt_token_ids().end());
      ids = ids_;
      finish = finish_;
      hold = hold_;
    }
    DecodeResponse admitted;
    admitted.set_admitted(true);
    writer->Write(admitted);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ctx->IsCancelled()) return Cancelled();
      DecodeResponse m;
      m.add_token_ids(ids[i]);
      if (i + 1 == ids.size() && !hold) m.set_finish_reason(finish);
      writer->Write(m);
      absl::SleepFor(absl::Milliseconds(1));
    }
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (hold && absl::Now() < end) {
      if (ctx->IsCancelled()) return Cancelled();
      absl::SleepFor(absl::Milliseconds(2));
    }
    return grpc::Status::OK;
  }
  grpc::Status GetLoad(grpc::ServerContext*, const internal::v1::GetLoadRequest*,
                       internal::v1::GetLoadResponse*) override {
    return grpc::Status::OK;
  }
  std::vector<uint32_t> prompt() {
    absl::MutexLock lock(&mu_);
    return prompt_;
  }
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

 private:
  grpc::Status Cancelled() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

  absl::Mutex mu_;
  std::vector<uint32_t> ids_, prompt_;
  pdserve::v1::FinishReason finish_ = pdserve::v1::FINISH_REASON_EOS;
  bool hold_ = false;
  bool cancelled_ = false;
};

// The chunks of an SSE answer, [DONE] aside.
std::vector<json> Events(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    out.push_back(json::parse(line.substr(6)));
  }
  return out;
}

class HarmonyHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(GptOssPath())) {
      GTEST_SKIP() << "gpt-oss tokenizer.json not found at " << GptOssPath()
                   << kGptOssMissing;
    }
    auto tok = BpeTokenizer::FromFile(GptOssPath(), kGptOssVocabSize);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = tok->get();
    StartDecode();
    WorkerPoolOptions po;
    po.poll_interval = absl::Milliseconds(50);
    po.addresses = {prefill_.address()};
    prefill_pool_ = std::make_unique<WorkerPool>(WorkerKind::kPrefill, po);
    po.addresses = {decode_address_};
    decode_pool_ = std::make_unique<WorkerPool>(WorkerKind::kDecode, po);
    prefill_pool_->Start();
    decode_pool_->Start();
    ASSERT_TRUE(prefill_pool_->WaitForHealthy(1, absl::Seconds(10)).ok());
    ASSERT_TRUE(decode_pool_->WaitForHealthy(1, absl::Seconds(10)).ok());
    config_.name = "gpt-oss-tiny";
    config_.vocab_size = kGptOssVocabSize;
    config_.max_context = 4096;
    config_.tokenizer = TokenizerType::kBpe;
    config_.chat_format = ChatFormat::kHarmony;
    RouterOptions ro;
    ro.local_prefill_max_tokens = 100000;
    ro.log_requests = false;
    router_ = std::make_unique<RouterService>(config_, *std::move(tok), prefill_pool_.get(), decode_pool_.get(), ro);
    grpc::ServerBuilder b;
    b.RegisterService(router_.get());
    router_server_ = b.BuildAndStart();
    ASSERT_NE(router_server_, nullptr);
    OpenAiHttpOptions o;
    o.program = "test";
    o.host = "127.0.0.1";
    o.config = &config_;
    o.tokenizer = router_->tokenizer();
    o.channel = router_server_->InProcessChannel(grpc::ChannelArguments());
    auto http = OpenAiHttpServer::Start(std::move(o));
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = std::move(*http);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_read_timeout(30, 0);
  }
  void TearDown() override {
    if (router_server_) router_server_->Shutdown(std::chrono::system_clock::now());
    http_.reset();
    router_.reset();
    prefill_pool_.reset();
    decode_pool_.reset();
    if (decode_server_) decode_server_->Shutdown(std::chrono::system_clock::now());
  }
  void StartDecode() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&decode_);
    decode_server_ = b.BuildAndStart();
    ASSERT_NE(decode_server_, nullptr);
    decode_address_ = "127.0.0.1:" + std::to_string(port);
  }

  // A scripted output: harmony text whose <|...|> are the special ids.
  std::vector<uint32_t> Ids(const std::string& harmony_text) const {
    auto ids = tok_->Encode(harmony_text, BpeTokenizer::SpecialTokens::kParse);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<uint32_t>{};
  }
  httplib::Result Chat(json body) {
    if (!body.contains("messages")) body["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
    return client_->Post("/v1/chat/completions", body.dump(), "application/json");
  }

  const BpeTokenizer* tok_ = nullptr;  // owned by router_
  testing::FakeWorker<internal::v1::PrefillWorker::CallbackService> prefill_;
  ScriptedDecode decode_;
  std::unique_ptr<grpc::Server> decode_server_;
  std::string decode_address_;
  std::unique_ptr<WorkerPool> prefill_pool_, decode_pool_;
  ModelConfig config_;
  std::unique_ptr<RouterService> router_;
  std::unique_ptr<grpc::Server> router_server_;
  std::unique_ptr<OpenAiHttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
};

const char kAnswer[] =
    "<|channel|>analysis<|message|>The user greets. Reply in kind. 😀<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! 👋<|return|>";

TEST_F(HarmonyHttpTest, WholeAnswerSplitsTheChannels) {
  const std::vector<uint32_t> script = Ids(kAnswer);
  decode_.Set(script, pdserve::v1::FINISH_REASON_EOS, /*hold=*/false);  // eos_token_id <|return|>
  auto r = Chat({{"messages", {{{"role", "system"}, {"content", "Be kind."}}, {{"role", "user"}, {"content", "Hi"}}}},
                 {"reasoning_effort", "low"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["reasoning_content"], "The user greets. Reply in kind. 😀");
  EXPECT_EQ(m["content"], "Hello! 👋");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], script.size());
  // The worker got the harmony prompt, as ids.
  const std::vector<uint32_t> prompt = decode_.prompt();
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  auto text = tok_->Decode(prompt, /*include_special=*/true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n", 0),
            0u)
      << *text;
  EXPECT_NE(text->find("\n\nReasoning: low\n\n"), std::string::npos) << *text;
  const std::string tail =
      "<|start|>developer<|message|># Instructions\n\nBe kind.<|end|><|start|>user<|message|>Hi<|end|>"
      "<|start|>assistant";
  EXPECT_EQ(text->substr(text->size() - std::min(text->size(), tail.size())), tail);
}

TEST_F(HarmonyHttpTest, StreamSplitsTheChannels) {
  decode_.Set(Ids(kAnswer), pdserve::v1::FINISH_REASON_EOS, /*hold=*/false);
  auto r = Chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
  const std::vector<json> events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content, finish;
  bool content_started = false;
  int reasoning_chunks = 0;
  for (const json& e : events) {
    if (e["choices"].empty()) continue;  // the usage chunk
    const json& d = e["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("reasoning_content") && d.contains("content") && !d["content"].get<std::string>().empty());
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_started) << "reasoning after content";
      reasoning += d["reasoning_content"].get<std::string>();
      ++reasoning_chunks;
    }
    if (d.contains("content")) {
      content += d["content"].get<std::string>();
      content_started = content_started || !d["content"].get<std::string>().empty();
    }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "The user greets. Reply in kind. 😀");
  EXPECT_EQ(content, "Hello! 👋");
  EXPECT_GT(reasoning_chunks, 3) << "streamed token by token";
  EXPECT_EQ(finish, "stop");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], Ids(kAnswer).size());
}

// The workers stop at eos_token_id only: the router ends the stream at
// <|call|> (and at <|return|> when it is not the eos) and cancels the
// decode call, as a stop string does.
TEST_F(HarmonyHttpTest, ReturnAndCallEndTheStreamAtTheRouter) {
  const std::string after = " and then some more text the model should never show";
  for (const std::string end : {"<|return|>", "<|call|>"}) {
    const std::string out = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final"
                            "<|message|>Done." + end + "<|start|>assistant<|channel|>final<|message|>" + after;
    decode_.Set(Ids(out), pdserve::v1::FINISH_REASON_LENGTH, /*hold=*/true);
    for (bool stream : {false, true}) {
      auto r = Chat({{"stream", stream}});
      ASSERT_TRUE(r) << end;
      ASSERT_EQ(r->status, 200) << r->body;
      std::string content, finish;
      if (stream) {
        for (const json& e : Events(r->body)) {
          if (e["choices"][0]["delta"].contains("content")) content += e["choices"][0]["delta"]["content"];
          if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
        }
      } else {
        const json j = json::parse(r->body);
        content = j["choices"][0]["message"]["content"];
        finish = j["choices"][0]["finish_reason"];
        EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
      }
      EXPECT_EQ(content, "Checking.Done.") << end << (stream ? " streamed" : "");
      EXPECT_EQ(finish, "stop") << end;
      const absl::Time deadline = absl::Now() + absl::Seconds(5);
      while (!decode_.cancelled() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
      EXPECT_TRUE(decode_.cancelled()) << end << ": the decode call was not cancelled";
      decode_.Set(Ids(out), pdserve::v1::FINISH_REASON_LENGTH, /*hold=*/true);
    }
  }
}

// ignore_eos generates past the stop tokens; the parser reads on.
TEST_F(HarmonyHttpTest, IgnoreEosGoesPastReturn) {
  decode_.Set(Ids("<|channel|>final<|message|>one<|return|><|start|>assistant<|channel|>final<|message|> two"),
              pdserve::v1::FINISH_REASON_LENGTH, /*hold=*/false);
  auto r = Chat({{"ignore_eos", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "one two");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

// What random weights write: no header anywhere. It arrives as content.
TEST_F(HarmonyHttpTest, MalformedOutputIsContent) {
  decode_.Set(Ids("just some words"), pdserve::v1::FINISH_REASON_LENGTH, /*hold=*/false);
  auto r = Chat({});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "just some words");
}

TEST_F(HarmonyHttpTest, ToolsAreA400NamingTheField) {
  auto r = Chat({{"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "tools");
  r = Chat({{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "tool"}, {"content", "42"}}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages[1].role");
}

}  // namespace
}  // namespace pdserve
