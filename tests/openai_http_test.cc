// OpenAiHttpServer against a fake Generator on an in-process gRPC channel:
// what reaches the router (request id, traceparent, the API key), how its
// statuses become HTTP statuses, the API key check, /health, and a client
// that leaves mid-stream cancelling the gRPC call.
#include "router/openai_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/net/httplib_config.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/generate.grpc.pb.h"

namespace pdserve {
namespace {

using json = nlohmann::json;

// Answers by prompt text: "ok" two messages; "endless" until cancelled;
// "code:N" fails with gRPC status N.
class FakeGenerator final : public pdserve::v1::Generator::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const pdserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<pdserve::v1::GenerateResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      last_request = *request;
      metadata.clear();
      for (const auto& [k, v] : context->client_metadata()) {
        metadata[std::string(k.data(), k.size())] = std::string(v.data(), v.size());
      }
    }
    const std::string& text = request->text();
    if (text.rfind("code:", 0) == 0) {
      return grpc::Status(static_cast<grpc::StatusCode>(std::stoi(text.substr(5))), "nope");
    }
    pdserve::v1::GenerateResponse m;
    m.set_text("a");
    if (text == "endless") {
      while (!context->IsCancelled() && writer->Write(m)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      cancelled = true;
      return grpc::Status::CANCELLED;
    }
    writer->Write(m);
    m.set_text("b");
    m.set_finish_reason(pdserve::v1::FINISH_REASON_LENGTH);
    m.mutable_usage()->set_prompt_tokens(2);
    m.mutable_usage()->set_generated_tokens(2);
    writer->Write(m);
    return grpc::Status::OK;
  }

  std::mutex mu;
  pdserve::v1::GenerateRequest last_request;
  std::map<std::string, std::string> metadata;
  std::atomic<bool> cancelled{false};
};

class OpenAiHttpTest : public ::testing::Test {
 protected:
  void Start(const std::string& api_key = "", absl::Duration request_timeout = absl::Seconds(600)) {
    grpc::ServerBuilder b;
    b.RegisterService(&fake_);
    grpc_ = b.BuildAndStart();
    ASSERT_NE(grpc_, nullptr);
    config_.name = "fake";
    OpenAiHttpOptions o;
    o.program = "test";
    o.host = "127.0.0.1";
    o.config = &config_;
    o.channel = grpc_->InProcessChannel(grpc::ChannelArguments());
    o.health = [this]() -> absl::Status {
      return healthy_ ? absl::OkStatus() : absl::UnavailableError("no healthy decode worker");
    };
    o.security.api_key = api_key;
    o.request_timeout = request_timeout;
    auto s = OpenAiHttpServer::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status();
    http_ = std::move(*s);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
  }
  void TearDown() override {
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now());
    http_.reset();
  }
  httplib::Result Post(const std::string& prompt, httplib::Headers headers = {}) {
    return client_->Post("/v1/completions", headers, json{{"prompt", prompt}}.dump(), "application/json");
  }

  FakeGenerator fake_;
  ModelConfig config_;
  std::atomic<bool> healthy_{true};
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<OpenAiHttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(OpenAiHttpTest, RequestIdAndTraceparentReachTheRouter) {
  Start();
  const std::string tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  auto r = Post("ok", {{"traceparent", tp}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 4);
  std::lock_guard<std::mutex> lock(fake_.mu);
  EXPECT_EQ(fake_.last_request.request_id(), j["id"]);
  EXPECT_EQ(r->get_header_value("X-Request-Id"), j["id"]);
  EXPECT_EQ(fake_.last_request.request_id().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(fake_.metadata["traceparent"], tp);
  EXPECT_EQ(fake_.metadata.count("authorization"), 0u);
}

TEST_F(OpenAiHttpTest, SeedIsTheClientsOrRandom) {
  Start();
  auto seed_seen = [this](const json& body) {
    auto r = client_->Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200);
    std::lock_guard<std::mutex> lock(fake_.mu);
    return fake_.last_request.sampling().seed();
  };
  EXPECT_EQ(seed_seen({{"prompt", "ok"}, {"seed", 5}}), 5u);
  EXPECT_NE(seed_seen({{"prompt", "ok"}}), seed_seen({{"prompt", "ok"}}));
}

TEST_F(OpenAiHttpTest, RouterStatusesBecomeHttpStatuses) {
  Start();
  const std::pair<grpc::StatusCode, int> cases[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, 400}, {grpc::StatusCode::RESOURCE_EXHAUSTED, 429},
      {grpc::StatusCode::UNAVAILABLE, 503},      {grpc::StatusCode::DEADLINE_EXCEEDED, 504},
      {grpc::StatusCode::UNAUTHENTICATED, 401},
  };
  for (const auto& [code, status] : cases) {
    auto r = Post("code:" + std::to_string(static_cast<int>(code)));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << code;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["error"]["message"], "nope");
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param") && j["error"].contains("code"));
  }
}

TEST_F(OpenAiHttpTest, ApiKeyGuardsV1Only) {
  Start("k3y");
  auto r = Post("ok");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  r = Post("ok", {{"Authorization", "Bearer k3"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = Post("ok", {{"Authorization", "Bearer k3y"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  {
    std::lock_guard<std::mutex> lock(fake_.mu);
    EXPECT_EQ(fake_.metadata["authorization"], "Bearer k3y");  // for the router's own gRPC key check
  }
  r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(OpenAiHttpTest, HealthFollowsTheWorkers) {
  Start();
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  healthy_ = false;
  r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("no healthy decode worker"), std::string::npos) << r->body;
  r = client_->Get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_found");
}

// A raw socket sends a streaming request, reads a little and closes.
TEST_F(OpenAiHttpTest, ClientLeavingMidStreamCancelsTheCall) {
  Start();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body = R"({"prompt": "endless", "stream": true})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  EXPECT_NE(got.find("text/event-stream"), std::string::npos) << got;
  EXPECT_FALSE(fake_.cancelled);
  close(fd);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fake_.cancelled && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(fake_.cancelled);
}

TEST_F(OpenAiHttpTest, BearerSchemeIsCaseInsensitive) {
  Start("k3y");
  for (const char* auth : {"bearer k3y", "BEARER k3y", "Bearer   k3y ", "bEaReR\tk3y"}) {
    auto r = Post("ok", {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << auth << ": " << r->body;
  }
  for (const char* auth : {"Basic k3y", "Bearerk3y", "Bearer", "k3y", "Bearer k3y2"}) {
    auto r = Post("ok", {{"Authorization", auth}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << auth;
  }
}

TEST(BearerTokenTest, SchemeAndSpaces) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("  bearer   abc  "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearerabc"), "");
  EXPECT_EQ(BearerToken(""), "");
}

// Each HTTP caller is its own client: by peer address, or by (a hash of)
// its API key when keys are in use; never the key itself.
TEST_F(OpenAiHttpTest, TheHttpCallerIsNamedToTheRouter) {
  Start();
  auto r = Post("ok");
  ASSERT_TRUE(r);
  {
    std::lock_guard<std::mutex> lock(fake_.mu);
    EXPECT_EQ(fake_.metadata["x-pdserve-client"], "http:127.0.0.1");
  }
  EXPECT_EQ(HttpClientIdentity("", false, "10.1.2.3"), "http:10.1.2.3");
  EXPECT_EQ(HttpClientIdentity("sekrit", false, "10.1.2.3"), "http:10.1.2.3");  // no keys configured
  const std::string a = HttpClientIdentity("sekrit", true, "10.1.2.3");
  EXPECT_EQ(a, HttpClientIdentity("sekrit", true, "10.9.9.9"));  // the key, not the address
  EXPECT_NE(a, HttpClientIdentity("sekrit2", true, "10.1.2.3"));
  EXPECT_EQ(a.rfind("key:", 0), 0u) << a;
  EXPECT_EQ(a.find("sekrit"), std::string::npos) << a;
}

TEST_F(OpenAiHttpTest, TheApiKeyNamesTheClient) {
  Start("k3y");
  auto r = Post("ok", {{"Authorization", "Bearer k3y"}});
  ASSERT_TRUE(r);
  std::lock_guard<std::mutex> lock(fake_.mu);
  EXPECT_EQ(fake_.metadata["x-pdserve-client"], HttpClientIdentity("k3y", true, "127.0.0.1"));
}

TEST(RequestTimeoutTest, TheClientMayOnlyLowerIt) {
  EXPECT_EQ(*RequestTimeout(nullptr, absl::Seconds(600)), absl::Seconds(600));
  const std::string half = "0.5", more = "7200", zero = "0", neg = "-1", word = "soon", inf = "inf";
  EXPECT_EQ(*RequestTimeout(&half, absl::Seconds(600)), absl::Milliseconds(500));
  EXPECT_EQ(*RequestTimeout(&more, absl::Seconds(600)), absl::Seconds(600));
  for (const std::string* bad : {&zero, &neg, &word, &inf}) {
    const auto t = RequestTimeout(bad, absl::Seconds(600));
    ASSERT_FALSE(t.ok()) << *bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("X-Request-Timeout"), std::string::npos) << t.status();
  }
}

// The deadline reaches the router's call: past it the answer is 504, and
// the router's side of the call is cancelled.
TEST_F(OpenAiHttpTest, TheClientsDeadlineEndsTheCall) {
  Start();
  auto r = Post("endless", {{"X-Request-Timeout", "0.2"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "timeout") << r->body;
  r = Post("ok", {{"X-Request-Timeout", "soon"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
}

TEST_F(OpenAiHttpTest, TheServersDeadlineEndsTheCall) {
  Start("", absl::Milliseconds(200));
  auto r = Post("endless");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504) << r->body;
  // A stream past its deadline ends with an error event, then [DONE].
  r = client_->Post("/v1/completions", json{{"prompt", "endless"}, {"stream", true}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("type":"timeout")"), std::string::npos) << r->body.substr(r->body.size() - 300);
  EXPECT_NE(r->body.rfind("data: [DONE]"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
