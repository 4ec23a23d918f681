// OpenAI-compatible HTTP server over the serving engine (see openai_server.h).

#include "runtime/serve/httplib.h"

#include "runtime/serve/openai_server.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/plan/plan_file.h"
#include "runtime/serve/engine.h"
#include "runtime/serve/metrics.h"
#include "runtime/serve/openai_request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr float kMinLogprob = -9999.0f;  // -inf is not JSON; vLLM clamps the same way
constexpr auto kKeepAlive = std::chrono::seconds(2);

// ---------------------------------------------------------------------------------------------
// Errors

const char* error_type(int status) {
  switch (status) {
    case 400: case 404: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return "server_error";
  }
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_json(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", error_type(e.status)},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.status}};
  return json{{"error", err}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

ApiError from_status(const Status& s, const std::string& param = "") {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return {400, s.message(), param};
    case StatusCode::kResourceExhausted: return {429, "the server is busy (waiting queue full): " + s.message(), ""};
    case StatusCode::kUnavailable: return {503, "the server is not accepting requests: " + s.message(), ""};
    case StatusCode::kNotFound: return {404, s.message(), param};
    default: return {500, s.to_string(), ""};
  }
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return std::string(prefix) + buf;
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Runs over the longer length whatever the contents, so timing reveals neither.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// One parsed completion request, with its response id.

struct Job : ParsedRequest {
  std::string id;
  int64_t created = 0;
};

struct Choice {
  int index = 0;
  int prompt = 0;
  std::unique_ptr<StreamingDecoder> decoder;
  std::string held;      // decoded text not yet released (could begin a stop string)
  std::string text;      // released text (non-streaming responses)
  int completion_tokens = 0;
  bool done = false;
  std::string finish_reason;
  std::string stop_reason;  // the stop string that ended the choice (vLLM's stop_reason)
  int64_t text_offset = 0;  // legacy logprobs: characters before the next token
  json logprobs;         // chat, non-streaming: {content: [...]}
  std::vector<TokenLogprob> token_logprobs;  // completions, non-streaming
};

struct PromptState {
  std::shared_ptr<RequestHandle> handle;
  bool finished = false;
  bool seen_first = false;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  std::vector<TokenLogprob> prompt_logprobs;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct OpenAIServer::Impl {
  const Plan* plan = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::atomic<Engine*> engine{nullptr};  // null while starting (see attach_engine)
  Metrics* metrics = nullptr;
  OpenAIServerOptions options;
  std::unique_ptr<RequestParser> parser;  // request bodies → jobs (model, lengths, chat template)
  int max_model_len = 0;

  httplib::Server server;
  int port = 0;
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> hurry{false};
  std::atomic<bool> engine_stopped{false};
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;

  void enter() {
    std::lock_guard<std::mutex> lock(active_mu);
    ++active;
  }
  void leave() {
    std::lock_guard<std::mutex> lock(active_mu);
    --active;
    active_cv.notify_all();
  }

  void install_routes();
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);

  std::string token_string(int32_t id) const {
    std::string s;
    tokenizer->append_token_bytes(id, /*skip_special=*/false, &s);
    return s;
  }
};

namespace {

/// Runs one job against the engine: submits its prompts, turns engine events into per-choice
/// text (stop strings applied) and hands each piece to the caller. Shared by the streaming and
/// the non-streaming paths.
class Generation {
 public:
  struct Piece {
    int choice = 0;
    std::string text;
    std::vector<TokenLogprob> logprobs;  // tokens released with this piece (when requested)
    std::string finish_reason;           // set on the choice's last piece
  };

  Generation(OpenAIServer::Impl& server, std::shared_ptr<Job> job)
      : s_(server), job_holder_(std::move(job)), job_(*job_holder_) {}
  ~Generation() { cancel(); }

  std::optional<ApiError> submit() {
    for (size_t p = 0; p < job_.prompts.size(); ++p) {
      EngineRequest r = job_.base;
      r.prompt = job_.prompts[p];
      auto h = s_.engine.load()->submit(std::move(r));
      if (!h.ok()) {
        cancel();
        return from_status(h.status(), job_.chat ? "messages" : "prompt");
      }
      prompts_.push_back({});
      prompts_.back().handle = std::move(h.value());
      prompts_.back().prompt_tokens = static_cast<int>(job_.prompts[p].size());
      for (int i = 0; i < job_.n; ++i) {
        choices_.emplace_back();
        Choice& c = choices_.back();
        c.index = static_cast<int>(p) * job_.n + i;
        c.prompt = static_cast<int>(p);
        c.decoder = std::make_unique<StreamingDecoder>(*s_.tokenizer, /*skip_special=*/true);
        if (job_.chat_logprobs)
          c.logprobs = json{{"content", json::array()}};
      }
    }
    return std::nullopt;
  }

  /// Asks the engine to stop every unfinished request.
  void cancel() {
    for (auto& p : prompts_)
      if (!p.finished && p.handle) {
        p.handle->cancel();
        p.finished = true;
      }
  }

  bool finished() const {
    for (const auto& p : prompts_)
      if (!p.finished) return false;
    return true;
  }

  /// Waits up to `timeout` for news. on_first(prompt) runs once per prompt on its first event;
  /// on_piece for every released piece. Returns an error when the engine failed the request.
  template <typename OnFirst, typename OnPiece>
  std::optional<ApiError> poll(std::chrono::milliseconds timeout, OnFirst&& on_first, OnPiece&& on_piece) {
    bool waited = false;
    for (size_t p = 0; p < prompts_.size(); ++p) {
      PromptState& ps = prompts_[p];
      if (ps.finished) continue;
      auto ev = ps.handle->next(waited ? std::chrono::milliseconds(0) : timeout);
      waited = true;
      if (!ev) continue;
      last_event_ = Clock::now();
      if (!ev->error.ok() && s_.engine_stopped) {
        // The server aborted everything at the end of a shutdown: those choices end as "abort".
        ev->error = Status();
        ev->finished = true;
        for (int i = 0; i < job_.n; ++i) {
          ChoiceDelta end;
          end.index = i;
          end.finish_reason = "abort";
          ev->choices.push_back(std::move(end));
        }
      }
      if (!ev->error.ok()) {
        ps.finished = true;
        cancel();
        ApiError e = from_status(ev->error);
        if (e.status == 400) e.status = 500;  // the request was accepted; the engine failed it
        return e;
      }
      if (!ps.seen_first) {
        ps.seen_first = true;
        if (ev->prompt_tokens > 0) ps.prompt_tokens = ev->prompt_tokens;
        ps.cached_tokens = ev->cached_tokens;
        ps.prompt_logprobs = std::move(ev->prompt_logprobs);
        on_first(static_cast<int>(p));
        if (job_.echo_only) {  // prompt scoring: nothing is generated
          for (int i = 0; i < job_.n; ++i) {
            Choice& c = choices_[p * job_.n + i];
            c.done = true;
            c.finish_reason = "length";
            on_piece(Piece{c.index, "", {}, "length"});
          }
          ps.handle->cancel();
          ps.finished = true;
          continue;
        }
      }
      for (ChoiceDelta& d : ev->choices) {
        if (d.index < 0 || d.index >= job_.n) continue;
        Choice& c = choices_[p * job_.n + d.index];
        if (c.done) continue;
        Piece piece;
        piece.choice = c.index;
        take_tokens(c, d, &piece);
        if (!piece.text.empty() || !piece.logprobs.empty() || !piece.finish_reason.empty())
          on_piece(std::move(piece));
      }
      bool all_done = true;
      for (int i = 0; i < job_.n; ++i) all_done = all_done && choices_[p * job_.n + i].done;
      if (ev->finished || all_done) {
        if (!ev->finished) ps.handle->cancel();  // every choice met a stop string
        ps.finished = true;
        for (int i = 0; i < job_.n; ++i) {  // the engine ended without a reason (should not be)
          Choice& c = choices_[p * job_.n + i];
          if (!c.done) {
            Piece piece;
            piece.choice = c.index;
            ChoiceDelta end;
            end.finish_reason = "abort";
            take_tokens(c, end, &piece);
            on_piece(std::move(piece));
          }
        }
      }
    }
    // After a forced shutdown the engine is gone: whatever has not ended is aborted.
    if (s_.engine_stopped && Clock::now() - last_event_ > std::chrono::seconds(2)) {
      for (size_t p = 0; p < prompts_.size(); ++p) {
        if (prompts_[p].finished) continue;
        prompts_[p].finished = true;
        for (int i = 0; i < job_.n; ++i) {
          Choice& c = choices_[p * job_.n + i];
          if (c.done) continue;
          Piece piece;
          piece.choice = c.index;
          ChoiceDelta end;
          end.finish_reason = "abort";
          take_tokens(c, end, &piece);
          on_piece(std::move(piece));
        }
      }
    }
    return std::nullopt;
  }

  std::vector<Choice>& choices() { return choices_; }
  const std::vector<PromptState>& prompts() const { return prompts_; }

  json usage() const {
    int prompt = 0, cached = 0, completion = 0;
    for (const auto& p : prompts_) {
      prompt += p.prompt_tokens;
      cached += p.cached_tokens;
    }
    for (const auto& c : choices_) completion += c.completion_tokens;
    return json{{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  /// Legacy (completions) logprobs object for `lps`, continuing `c`'s text offsets.
  json legacy_logprobs(Choice& c, const std::vector<TokenLogprob>& lps, bool first_is_bare) const {
    json out{{"text_offset", json::array()}, {"token_logprobs", json::array()},
             {"tokens", json::array()}, {"top_logprobs", json::array()}};
    for (size_t i = 0; i < lps.size(); ++i) {
      const TokenLogprob& t = lps[i];
      std::string tok = s_.token_string(t.token);
      out["tokens"].push_back(tok);
      out["text_offset"].push_back(c.text_offset);
      c.text_offset += utf8_length(tok);
      if (first_is_bare && i == 0) {
        out["token_logprobs"].push_back(nullptr);
        out["top_logprobs"].push_back(nullptr);
        continue;
      }
      out["token_logprobs"].push_back(std::max(t.logprob, kMinLogprob));
      json top = json::object();
      for (const auto& [id, lp] : t.top) top[s_.token_string(id)] = std::max(lp, kMinLogprob);
      std::string own = tok;
      if (!top.contains(own)) top[own] = std::max(t.logprob, kMinLogprob);
      out["top_logprobs"].push_back(std::move(top));
    }
    return out;
  }

  json chat_logprobs(const std::vector<TokenLogprob>& lps) const {
    json content = json::array();
    auto entry = [&](int32_t id, float lp) {
      std::string tok = s_.token_string(id);
      json bytes = json::array();
      for (unsigned char b : tok) bytes.push_back(static_cast<int>(b));
      return json{{"token", tok}, {"logprob", std::max(lp, kMinLogprob)}, {"bytes", bytes}};
    };
    for (const TokenLogprob& t : lps) {
      json e = entry(t.token, t.logprob);
      json top = json::array();
      for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return content;
  }

 private:
  // Feeds a delta's tokens through the choice's decoder and the stop strings.
  void take_tokens(Choice& c, const ChoiceDelta& d, Piece* piece) {
    const bool want_lp = job_.legacy_logprobs >= 0 || job_.chat_logprobs;
    for (const TokenLogprob& t : d.tokens) {
      ++c.completion_tokens;
      if (want_lp) piece->logprobs.push_back(t);
      if (release(c, c.decoder->push(t.token), &piece->text)) {
        c.done = true;
        c.finish_reason = piece->finish_reason = "stop";
        return;
      }
    }
    if (!d.finish_reason.empty()) {
      release(c, c.decoder->flush(), &piece->text);
      piece->text += c.held;  // a partial stop string that never completed
      c.held.clear();
      c.done = true;
      c.finish_reason = piece->finish_reason = d.finish_reason;
    }
  }

  // Appends `text` to what is held; releases into `out` what can no longer begin a stop string.
  // True when a stop string was found (the text before it is released, the rest dropped).
  bool release(Choice& c, const std::string& text, std::string* out) {
    c.held += text;
    if (job_.stop.empty()) {
      out->append(c.held);
      c.held.clear();
      return false;
    }
    size_t best = std::string::npos, best_len = 0;
    for (const std::string& stop : job_.stop) {
      size_t at = c.held.find(stop);
      if (at < best) {
        best = at;
        best_len = stop.size();
      }
    }
    if (best != std::string::npos) {
      c.stop_reason = c.held.substr(best, best_len);
      out->append(c.held, 0, best + (job_.include_stop ? best_len : 0));
      c.held.clear();
      return true;
    }
    size_t keep = 0;
    for (const std::string& stop : job_.stop)
      for (size_t k = std::min(stop.size() - 1, c.held.size()); k > keep; --k)
        if (c.held.compare(c.held.size() - k, k, stop, 0, k) == 0) {
          keep = k;
          break;
        }
    out->append(c.held, 0, c.held.size() - keep);
    c.held.erase(0, c.held.size() - keep);
    return false;
  }

  OpenAIServer::Impl& s_;
  std::shared_ptr<Job> job_holder_;
  Job& job_;
  std::vector<PromptState> prompts_;
  std::vector<Choice> choices_;
  Clock::time_point last_event_ = Clock::now();
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handlers

void OpenAIServer::Impl::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (draining) return send_error(res, {503, "the server is shutting down; not accepting new requests", ""});
  if (!ready) return send_error(res, {503, "the server is starting; the model is not loaded yet", ""});
  auto job = std::make_shared<Job>();
  if (auto e = parser->parse(req.body, chat ? Endpoint::kChat : Endpoint::kCompletions, job.get()))
    return send_error(res, *e);
  job->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  job->created = unix_now();

  auto gen = std::make_shared<Generation>(*this, job);
  if (auto e = gen->submit()) return send_error(res, *e);

  const std::string object = chat ? "chat.completion" : "text_completion";
  auto header = [job, this](const std::string& obj) {
    return json{{"id", job->id}, {"object", obj}, {"created", job->created}, {"model", options.model_name}};
  };

  if (!job->stream) {
    enter();
    std::optional<ApiError> failure;
    while (!gen->finished()) {
      failure = gen->poll(std::chrono::milliseconds(200), [](int) {}, [&](Generation::Piece&& piece) {
        Choice& c = gen->choices()[piece.choice];
        c.text += piece.text;
        if (job->legacy_logprobs >= 0)
          c.token_logprobs.insert(c.token_logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
        if (job->chat_logprobs)
          for (json& e : gen->chat_logprobs(piece.logprobs)) c.logprobs["content"].push_back(std::move(e));
      });
      if (failure) break;
    }
    leave();
    if (failure) return send_error(res, *failure);
    json out = header(object);
    json choices = json::array();
    for (Choice& c : gen->choices()) {
      json ch{{"index", c.index}};
      const PromptState& ps = gen->prompts()[c.prompt];
      if (chat) {
        ch["message"] = json{{"role", "assistant"}, {"content", c.text}};
        ch["logprobs"] = job->chat_logprobs ? c.logprobs : json(nullptr);
      } else {
        std::string text = job->echo ? job->echo_texts[c.prompt] + c.text : c.text;
        ch["text"] = text;
        if (job->legacy_logprobs >= 0) {
          // Prompt tokens (echo) first, then the generated ones.
          std::vector<TokenLogprob> all;
          if (job->echo) {
            all = ps.prompt_logprobs;
            if (all.empty())
              for (int32_t id : job->prompts[c.prompt]) all.push_back({id, 0.0f, {}});
          }
          all.insert(all.end(), c.token_logprobs.begin(), c.token_logprobs.end());
          ch["logprobs"] = gen->legacy_logprobs(c, all, /*first_is_bare=*/job->echo);
        } else {
          ch["logprobs"] = nullptr;
        }
      }
      ch["finish_reason"] = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
      ch["stop_reason"] = c.stop_reason.empty() ? json(nullptr) : json(c.stop_reason);
      choices.push_back(std::move(ch));
    }
    out["choices"] = std::move(choices);
    out["usage"] = gen->usage();
    res.set_content(dump(out), "application/json");
    return;
  }

  // Streaming: everything runs inside one call of the content provider, so a server stop between
  // calls cannot cut a stream short; a failed write means the client left: cancel.
  enter();
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, gen, header, chunk_object, chat](size_t, httplib::DataSink& sink) -> bool {
        Clock::time_point last_write = Clock::now();
        auto send = [&](const std::string& data) {
          if (!sink.write(data.data(), data.size())) return false;
          last_write = Clock::now();
          return true;
        };
        auto send_chunk = [&](json choices) {
          json c = header(chunk_object);
          c["choices"] = std::move(choices);
          if (job->include_usage) c["usage"] = nullptr;
          return send("data: " + dump(c) + "\n\n");
        };
        bool alive = true;
        if (chat) {
          for (Choice& c : gen->choices()) {
            json ch{{"index", c.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr}, {"finish_reason", nullptr}};
            if (!(alive = send_chunk(json::array({ch})))) break;
          }
        }
        std::optional<ApiError> failure;
        while (alive && !gen->finished()) {
          failure = gen->poll(
              std::chrono::milliseconds(100),
              [&](int prompt) {
                if (chat || !job->echo || !alive) return;
                const PromptState& ps = gen->prompts()[prompt];
                for (int i = 0; i < job->n; ++i) {
                  Choice& c = gen->choices()[prompt * job->n + i];
                  json ch{{"index", c.index}, {"text", job->echo_texts[prompt]}, {"logprobs", nullptr},
                          {"finish_reason", nullptr}};
                  if (job->legacy_logprobs >= 0) {
                    std::vector<TokenLogprob> lps = ps.prompt_logprobs;
                    if (lps.empty())
                      for (int32_t id : job->prompts[prompt]) lps.push_back({id, 0.0f, {}});
                    ch["logprobs"] = gen->legacy_logprobs(c, lps, /*first_is_bare=*/true);
                  }
                  if (!(alive = send_chunk(json::array({ch})))) return;
                }
              },
              [&](Generation::Piece&& piece) {
                if (!alive) return;
                Choice& c = gen->choices()[piece.choice];
                json ch{{"index", c.index}};
                if (chat) {
                  ch["delta"] = piece.text.empty() && !piece.finish_reason.empty() ? json::object()
                                                                                   : json{{"content", piece.text}};
                  ch["logprobs"] = job->chat_logprobs && !piece.logprobs.empty()
                                       ? json{{"content", gen->chat_logprobs(piece.logprobs)}}
                                       : json(nullptr);
                } else {
                  ch["text"] = piece.text;
                  ch["logprobs"] = job->legacy_logprobs >= 0 && !piece.logprobs.empty()
                                       ? gen->legacy_logprobs(c, piece.logprobs, false)
                                       : json(nullptr);
                }
                ch["finish_reason"] = piece.finish_reason.empty() ? json(nullptr) : json(piece.finish_reason);
                if (!piece.finish_reason.empty())
                  ch["stop_reason"] = c.stop_reason.empty() ? json(nullptr) : json(c.stop_reason);
                alive = send_chunk(json::array({ch}));
              });
          if (failure) break;
          // While nothing comes (queued), an SSE comment tells whether the client is still there.
          if (alive && Clock::now() - last_write > kKeepAlive) alive = send(": keep-alive\n\n");
        }
        if (!alive) {
          gen->cancel();
          return false;
        }
        if (failure) {
          alive = send("data: " + dump(error_json(*failure)) + "\n\n");
        } else if (job->include_usage) {
          json u = header(chunk_object);
          u["choices"] = json::array();
          u["usage"] = gen->usage();
          alive = send("data: " + dump(u) + "\n\n");
        }
        if (alive) alive = send("data: [DONE]\n\n");
        if (!alive) return false;
        sink.done();
        return true;
      },
      [this, gen](bool) {
        gen->cancel();  // no-op when it finished; frees the blocks of a client that left
        leave();
      });
}

void OpenAIServer::Impl::install_routes() {
  server.set_payload_max_length(options.max_body_bytes);
  server.set_keep_alive_max_count(1000);
  server.set_read_timeout(30);
  server.set_write_timeout(30);
  server.set_tcp_nodelay(true);
  const int threads = std::max(4, options.max_connections);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };

  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    if (options.api_key.empty() || req.path.rfind("/v1", 0) != 0) return R::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string expected = "Bearer " + options.api_key;
    if (!constant_time_equal(auth, expected)) {
      send_error(res, {401, auth.empty() ? "Missing API key: send 'Authorization: Bearer <key>'"
                                         : "Incorrect API key provided", ""});
      res.set_header("WWW-Authenticate", "Bearer");
      return R::Handled;
    }
    return R::Unhandled;
  });

  server.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    if (!res.body.empty()) return R::Unhandled;  // a handler already wrote an OpenAI error
    ApiError e{res.status, "", ""};
    switch (res.status) {
      case 404: e.message = "Not Found: " + req.method + " " + req.path; break;
      case 405: e.message = "Method Not Allowed: " + req.method + " " + req.path; break;
      case 413:
        e.message = "request body too large: the limit is " + std::to_string(options.max_body_bytes) + " bytes";
        break;
      case 400: e.message = "malformed HTTP request"; break;
      default: e.message = "HTTP error " + std::to_string(res.status); break;
    }
    res.set_content(dump(error_json(e)), "application/json");
    return R::Handled;
  }));

  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    send_error(res, {500, what, ""});
  });

  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, /*chat=*/false);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, /*chat=*/true);
  });
  auto model_card = [this] {
    return json{{"id", options.model_name}, {"object", "model"}, {"created", unix_now()},
                {"owned_by", "llmrt"}, {"root", options.model_name}, {"parent", nullptr},
                {"max_model_len", max_model_len}};
  };
  server.Get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_card()})}}), "application/json");
  });
  server.Get("/v1/models/(.+)", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != options.model_name) return send_error(res, {404, "The model `" + id + "` does not exist.", "model"});
    res.set_content(dump(model_card()), "application/json");
  });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready || draining) {
      res.status = 503;
      res.set_content(draining ? "draining\n" : "starting\n", "text/plain");
      return;
    }
    res.set_content("", "text/plain");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics ? metrics->serialize() : std::string(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

// ---------------------------------------------------------------------------------------------

OpenAIServer::OpenAIServer() : impl_(std::make_unique<Impl>()) {}
OpenAIServer::~OpenAIServer() { stop(); }

StatusOr<std::unique_ptr<OpenAIServer>> OpenAIServer::create(const Plan& plan, const Tokenizer& tokenizer,
                                                             Engine* engine, Metrics* metrics,
                                                             OpenAIServerOptions options) {
  std::unique_ptr<OpenAIServer> s(new OpenAIServer());
  Impl& m = *s->impl_;
  m.plan = &plan;
  m.tokenizer = &tokenizer;
  m.engine = engine;
  m.metrics = metrics;
  m.options = std::move(options);
  m.max_model_len = engine ? engine->config().max_model_len : m.options.max_model_len;
  if (m.max_model_len <= 0) return invalid_argument("the server needs the engine or options.max_model_len");
  RequestParserOptions po;
  po.model_name = m.options.model_name;
  po.max_model_len = m.max_model_len;
  // llmc refuses a tokenizer larger than the model's vocabulary, so its ids are the ones the
  // engine accepts.
  po.vocab_size = engine && engine->config().vocab_size > 0
                      ? std::min(engine->config().vocab_size, tokenizer.vocab_size())
                      : tokenizer.vocab_size();
  if (const fb::GenerationDefaults* g = plan.fb().generation()) {
    // Parameters a request leaves out come from generation_config.json, as in vLLM.
    po.sampling_defaults.temperature = g->temperature();
    po.sampling_defaults.top_p = g->top_p();
    po.sampling_defaults.top_k = g->top_k();
    po.sampling_defaults.min_p = g->min_p();
    po.sampling_defaults.repetition_penalty = g->repetition_penalty();
    po.default_max_new_tokens = g->max_new_tokens();
  }
  auto parser = RequestParser::create(tokenizer, std::move(po));
  if (!parser.ok()) return parser.status();
  m.parser = std::move(parser.value());
  m.install_routes();
  return s;
}

Status OpenAIServer::bind() {
  Impl& m = *impl_;
  if (m.options.port < 0 || m.options.port > 65535)
    return invalid_argument("--port must be in 0..65535, got " + std::to_string(m.options.port));
  if (m.options.port == 0) {
    m.port = m.server.bind_to_any_port(m.options.host);
    if (m.port <= 0) return unavailable("cannot bind " + m.options.host + " to a free port");
  } else {
    if (!m.server.bind_to_port(m.options.host, m.options.port))
      return unavailable("cannot bind " + m.options.host + ":" + std::to_string(m.options.port) +
                         " (in use, or not an address of this machine)");
    m.port = m.options.port;
  }
  return ok_status();
}

int OpenAIServer::port() const { return impl_->port; }
const std::string& OpenAIServer::host() const { return impl_->options.host; }

void OpenAIServer::attach_engine(Engine& engine) {
  if (engine.config().max_model_len != impl_->max_model_len)
    std::fprintf(stderr, "llmrt: warning: engine max_model_len %d differs from the server's %d\n",
                 engine.config().max_model_len, impl_->max_model_len);
  impl_->engine.store(&engine);
  impl_->ready = true;
}

Status OpenAIServer::serve() {
  if (impl_->engine.load()) impl_->ready = true;
  if (!impl_->server.listen_after_bind()) return unavailable("the HTTP server stopped with an error");
  return ok_status();
}

void OpenAIServer::shutdown(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  m.draining = true;
  if (!m.engine.load()) return stop();  // still starting: nothing runs
  m.engine.load()->drain();
  const Clock::time_point deadline = Clock::now() + timeout;
  bool idle = false;
  while (!m.hurry && Clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (m.engine.load()->wait_idle(std::min(left, std::chrono::milliseconds(100)))) {
      idle = true;
      break;
    }
  }
  if (!idle) {
    std::fprintf(stderr, "llmrt: shutdown: aborting the requests still running\n");
    m.engine_stopped = true;  // first: the handlers read the engine's last events as aborts
    m.engine.load()->shutdown();
  }
  // Let the handlers write their last chunks before the sockets close.
  {
    std::unique_lock<std::mutex> lock(m.active_mu);
    m.active_cv.wait_for(lock, std::chrono::seconds(idle ? 10 : 5), [&] { return m.active == 0; });
  }
  stop();
}

void OpenAIServer::hurry() { impl_->hurry = true; }

void OpenAIServer::stop() {
  if (impl_->server.is_running()) impl_->server.stop();
}

int OpenAIServer::active_requests() const {
  std::lock_guard<std::mutex> lock(impl_->active_mu);
  return impl_->active;
}

}  // namespace llmrt
