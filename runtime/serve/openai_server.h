// The OpenAI-compatible HTTP front of the serving engine (`llmrt serve`), shaped like vLLM's
// OpenAI server so its clients carry over:
//
//   POST /v1/completions        prompt: string | [string] | [int] | [[int]]; echo; legacy logprobs
//   POST /v1/chat/completions   messages rendered by the plan's chat template (tools passed on)
//   GET  /v1/models             the one served model
//   GET  /health                200 when ready, 503 while starting or draining
//   GET  /metrics               Metrics::serialize() (Prometheus text 0.0.4)
//
// Streaming is Server-Sent Events (`data: {json}\n\n` ... `data: [DONE]\n\n`). Text is decoded
// per choice by a StreamingDecoder (never half a UTF-8 character), and text that could still
// begin a stop string is held back, so a stop string is never split across chunks nor returned.
//
// Every error has OpenAI's shape {"error": {"message", "type", "param", "code"}}: 400 bad JSON,
// wrong types, out-of-range values, prompts longer than max_model_len and chat-template errors;
// 401 missing or wrong bearer key (/v1/* only, constant-time compare); 404 unknown model or path;
// 413 body over max_body_bytes; 429 waiting queue full; 503 starting or draining.
// Request bodies are checked by RequestParser (openai_request.h), which needs no engine.
//
// A streaming client that goes away has its request cancelled (its KV blocks freed) at the next
// chunk written; while a request waits in the queue a keep-alive SSE comment is written every
// two seconds so that happens there too.
//
// Thread safety: handlers run on a pool of max_connections threads; shutdown() and stop() may be
// called from any thread (a signal-handling thread, typically).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/base/status.h"

namespace llmrt {

class Engine;
class Metrics;
class Plan;
class Tokenizer;

struct OpenAIServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: a free port (see port() after bind())
  std::string api_key;                  // "": no authentication
  std::string model_name;               // the id clients send as "model"
  size_t max_body_bytes = 16u << 20;    // larger request bodies get 413
  int max_connections = 256;            // worker threads (concurrent requests, streams included)
  int max_model_len = 0;                // needed when create() gets no engine (it comes later)
};

class OpenAIServer {
 public:
  /// `plan`, `tokenizer`, `engine` and `metrics` (optional) must outlive the server. Fails when
  /// the plan's chat template cannot be parsed (chat requests would have nothing to render with:
  /// a plan without a template still serves /v1/completions).
  static StatusOr<std::unique_ptr<OpenAIServer>> create(const Plan& plan, const Tokenizer& tokenizer,
                                                        Engine* engine, Metrics* metrics,
                                                        OpenAIServerOptions options);
  /// With a null engine at create() the server answers 503 ("starting") until this is called.
  void attach_engine(Engine& engine);
  ~OpenAIServer();

  /// Binds host:port; after this port() is the real port.
  Status bind();
  int port() const;
  const std::string& host() const;
  /// Accepts and serves requests until stop(); returns when the server has stopped.
  Status serve();

  /// Graceful stop (SIGTERM): new requests get 503, running ones may finish for up to `timeout`;
  /// the rest are aborted (their streams end with finish_reason "abort"); then stop().
  void shutdown(std::chrono::milliseconds timeout);
  /// Makes a shutdown() in progress stop waiting (a second SIGINT).
  void hurry();
  /// Stops accepting and closes the listening socket; serve() returns.
  void stop();

  /// Number of completion requests being handled (streams included).
  int active_requests() const;

  struct Impl;  // internal (public only for the file's helpers)

 private:
  OpenAIServer();
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrt
