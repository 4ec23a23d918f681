// The HTTP server's life cycle on the tiny plan: 503 while starting (no engine yet), serving once
// the engine is attached, 503 while draining, and a clean stop.
#include "runtime/serve/openai_server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "runtime/serve/engine.h"
#include "runtime/serve/httplib.h"
#include "runtime/serve/metrics.h"
#include "tests/unit/tiny_chat_tokenizer.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

TEST(OpenAIServer, StartingThenServingThenDraining) {
  testing::TinyPlanConfig cfg;
  cfg.max_model_len = 64;
  const testing::TinyPlanSpec spec = testing::make_tiny_plan(cfg);
  auto plan = testing::open_tiny_plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto tokenizer = testing::tiny_chat_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  Metrics metrics("tiny");
  OpenAIServerOptions o;
  o.port = 0;
  o.model_name = "tiny";
  o.max_model_len = 64;
  auto server_or = OpenAIServer::create(**plan, *tokenizer, nullptr, &metrics, o);
  ASSERT_TRUE(server_or.ok()) << server_or.status().to_string();
  std::unique_ptr<OpenAIServer> server = std::move(server_or).value();
  ASSERT_TRUE(server->bind().ok());
  Status served;
  std::thread serve([&] { served = server->serve(); });

  httplib::Client client("127.0.0.1", server->port());
  client.set_read_timeout(60, 0);
  const std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0})";
  // Starting: the port is open, the model is not.
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(health->body, "starting\n");
  auto early = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_NE(early->body.find("starting"), std::string::npos) << early->body;
  EXPECT_TRUE(nlohmann::json::parse(early->body).contains("error"));

  EngineOptions eo;
  eo.threads = 1;
  eo.kv_cache_bytes = 1 << 22;
  auto engine = Engine::create(**plan, eo, &metrics);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  server->attach_engine(**engine);
  health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto res = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto j = nlohmann::json::parse(res->body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  server->shutdown(std::chrono::milliseconds(2000));
  serve.join();
  EXPECT_TRUE(served.ok()) << served.to_string();
  (*engine)->shutdown();
}

}  // namespace
}  // namespace llmrt
