// llmrt bench-serve: a serving benchmark in the manner of vLLM's benchmark_serving.
//
// Sends --num-prompts streaming requests to an OpenAI-compatible server (--url, or a `llmrt serve`
// child started on --plan), with Poisson arrivals at --request-rate (inf: all at once) and at most
// --max-concurrency in flight. Prompts are random token ids (prompt-as-token-ids form of
// /v1/completions, so input lengths are exact) or come from a --dataset JSONL file; every request
// asks for ignore_eos and max_tokens = its output length at temperature 0, so output lengths are
// exact too. Prints duration, completed/failed, token totals and throughputs, and TTFT, TPOT, ITL
// and E2E latency (mean, median, p90, p99 in ms); --json-out writes the same figures, --baseline
// prints each figure's change against an earlier --json-out file.
//
// One thread per in-flight request; each has its own HTTP connection (cpp-httplib).
#include <fcntl.h>
#include "runtime/serve/httplib.h"
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/plan/plan_file.h"
#include "runtime/serve/model_cache.h"
#include "tools/llmrt_commands.h"

namespace llmrt_tools {
namespace {

using llmrt::Status;
using llmrt::StatusOr;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string plan;
  std::string serve_args;
  std::string model;
  std::string endpoint = "/v1/completions";
  std::string api_key;
  int num_prompts = 1000;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int vocab_size = 0;
  std::string dataset;
  uint64_t seed = 0;
  std::string json_out;
  std::string baseline;
  double request_timeout = 600;
  double ready_timeout = 600;
};


// ---------------------------------------------------------------------------------------------
// Small pieces

struct Url {
  std::string host;
  int port = 80;
  std::string prefix;  // path before the endpoint, no trailing '/'
  std::string text() const { return "http://" + host + ":" + std::to_string(port) + prefix; }
};

StatusOr<Url> parse_url(const std::string& text) {
  const std::string scheme = "http://";
  if (text.rfind("https://", 0) == 0)
    return llmrt::invalid_argument("--url " + text + ": https is not supported; use http://");
  if (text.rfind(scheme, 0) != 0)
    return llmrt::invalid_argument("--url " + text + ": expected http://HOST[:PORT][/PREFIX]");
  std::string rest = text.substr(scheme.size());
  Url url;
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!url.prefix.empty() && url.prefix.back() == '/') url.prefix.pop_back();
  }
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    std::string port = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535)
      return llmrt::invalid_argument("--url " + text + ": bad port '" + port + "'");
    url.port = static_cast<int>(p);
  }
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) return llmrt::invalid_argument("--url " + text + ": no host");
  url.host = rest;
  return url;
}

/// Splits --serve-args on blanks; single or double quotes group words.
StatusOr<std::vector<std::string>> split_args(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote) return llmrt::invalid_argument("--serve-args: unterminated quote");
  if (in_word) out.push_back(cur);
  return out;
}

class Semaphore {
 public:
  explicit Semaphore(int count) : count_(count) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ > 0; });
    --count_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
};

/// "[#######.............] 12/64" on stderr: redrawn in place on a terminal, a line per tenth
/// otherwise (logs stay short).
class Progress {
 public:
  explicit Progress(int total) : total_(total), tty_(::isatty(2)) { draw(0); }
  void tick() {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    if (tty_ || done_ * 10 / total_ != (done_ - 1) * 10 / total_ || done_ == total_) draw(done_);
  }
  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  void draw(int done) {
    constexpr int kWidth = 30;
    const int filled = total_ ? done * kWidth / total_ : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, tty_ ? "\r[%s] %d/%d" : "[%s] %d/%d\n", bar.c_str(), done, total_);
    std::fflush(stderr);
  }
  std::mutex mu_;
  int total_;
  int done_ = 0;
  bool tty_;
};

// ---------------------------------------------------------------------------------------------
// `llmrt serve PLAN --port 0` as a child process (--plan).

class ServerProcess {
 public:
  ~ServerProcess() { stop(); }

  Status start(const std::string& plan, const std::vector<std::string>& extra, double ready_timeout) {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return llmrt::internal_error("cannot find the running llmrt (/proc/self/exe)");
    self[n] = '\0';
    std::vector<std::string> args = {self, "serve", plan, "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return llmrt::internal_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) return llmrt::internal_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      // Child: only async-signal-safe calls until exec. Dies with the benchmark.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    read_fd_ = fds[0];
    std::string cmd;
    for (size_t i = 0; i + 1 < argv.size(); ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    std::fprintf(stderr, "llmrt: bench-serve: starting %s\n", cmd.c_str());
    reader_ = std::thread([this] { read_output(); });

    std::unique_lock<std::mutex> lock(mu_);
    const bool ready = cv_.wait_for(lock, std::chrono::duration<double>(ready_timeout),
                                    [&] { return !url_.empty() || eof_; });
    if (!url_.empty()) return llmrt::ok_status();
    std::string tail;
    for (const std::string& l : last_lines_) tail += "\n  " + l;
    lock.unlock();
    if (!ready) return llmrt::unavailable("llmrt serve did not report 'listening on' within " +
                                          std::to_string(static_cast<int>(ready_timeout)) +
                                          " s (--ready-timeout); its last lines:" + tail);
    int status = wait_exit(5.0);
    return llmrt::unavailable("llmrt serve exited (" + describe(status) + ") before listening; its last lines:" + tail);
  }

  std::string url() {
    std::lock_guard<std::mutex> lock(mu_);
    return url_;
  }
  bool exited() {
    std::lock_guard<std::mutex> lock(mu_);
    return eof_;
  }

  /// SIGTERM, wait (the server drains), SIGKILL after a grace period. Returns a description.
  std::string stop() {
    std::string what;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = wait_exit(60.0);
      if (status == -1) {
        ::kill(pid_, SIGKILL);
        status = wait_exit(10.0);
      }
      what = describe(status);
      pid_ = -1;
    }
    if (reader_.joinable()) reader_.join();
    if (read_fd_ >= 0) ::close(read_fd_);
    read_fd_ = -1;
    return what;
  }

 private:
  static std::string describe(int status) {
    if (status == -1) return "still running";
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

  /// The wait status, or -1 if it is still running after `seconds`.
  int wait_exit(double seconds) {
    if (pid_ <= 0) return -1;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      if (r < 0 && errno != EINTR) return -1;
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  /// Forwards the server's lines to stderr until it listens, then keeps only the last few
  /// (shown if it fails); the pipe is drained to the end so the server never blocks on it.
  void read_output() {
    std::string buf;
    char chunk[4096];
    for (;;) {
      ssize_t r = ::read(read_fd_, chunk, sizeof(chunk));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      buf.append(chunk, static_cast<size_t>(r));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        on_line(line);
      }
    }
    if (!buf.empty()) on_line(buf);
    std::lock_guard<std::mutex> lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }

  void on_line(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    last_lines_.push_back(line);
    if (last_lines_.size() > 20) last_lines_.pop_front();
    if (!url_.empty()) return;
    std::fprintf(stderr, "  [serve] %s\n", line.c_str());
    const std::string marker = "listening on http://";
    size_t at = line.find(marker);
    if (at == std::string::npos) return;
    std::string addr = line.substr(at + marker.size());
    size_t end = addr.find_first_of(" \t\r/");
    if (end != std::string::npos) addr.resize(end);
    // A wildcard bind is reached through loopback.
    if (addr.rfind("0.0.0.0:", 0) == 0) addr = "127.0.0.1" + addr.substr(7);
    if (addr.rfind("[::]:", 0) == 0) addr = "[::1]" + addr.substr(4);
    url_ = "http://" + addr;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string url_;
  bool eof_ = false;
  std::deque<std::string> last_lines_;
};

// ---------------------------------------------------------------------------------------------
// Workload

struct BenchRequest {
  json prompt;        // [ids] or text
  int input_len = 0;  // known input tokens (ids), 0 for text (the server's usage tells)
  int output_len = 0;
};

std::vector<BenchRequest> random_requests(const BenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto range = [&](int len) {
    int lo = std::max(1, static_cast<int>(len * (1.0 - o.random_range_ratio)));
    int hi = std::max(lo, static_cast<int>(len * (1.0 + o.random_range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi);
  };
  auto in_dist = range(o.random_input_len), out_dist = range(o.random_output_len);
  std::uniform_int_distribution<int> token(0, o.vocab_size - 1);
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (BenchRequest& r : out) {
    r.input_len = in_dist(rng);
    r.output_len = out_dist(rng);
    std::vector<int> ids(static_cast<size_t>(r.input_len));
    for (int& id : ids) id = token(rng);
    r.prompt = ids;
  }
  return out;
}

StatusOr<std::vector<BenchRequest>> dataset_requests(const std::string& path, int vocab_size) {
  std::ifstream in(path);
  if (!in) return llmrt::not_found("--dataset " + path + ": cannot open");
  std::vector<BenchRequest> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return llmrt::invalid_argument(where + "not a JSON object");
    BenchRequest r;
    if (!j.contains("prompt")) return llmrt::invalid_argument(where + "no \"prompt\"");
    const json& p = j["prompt"];
    if (p.is_string()) {
      if (p.get_ref<const std::string&>().empty()) return llmrt::invalid_argument(where + "empty \"prompt\"");
    } else if (p.is_array() && !p.empty()) {
      for (const json& id : p)
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || (vocab_size > 0 && id.get<int64_t>() >= vocab_size))
          return llmrt::invalid_argument(where + "\"prompt\" token ids must be integers in [0, vocab)");
      r.input_len = static_cast<int>(p.size());
    } else {
      return llmrt::invalid_argument(where + "\"prompt\" must be a string or a non-empty array of token ids");
    }
    r.prompt = p;
    if (!j.contains("output_len") || !j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() < 1 ||
        j["output_len"].get<int64_t>() > (1 << 24))
      return llmrt::invalid_argument(where + "\"output_len\" must be a positive integer");
    r.output_len = j["output_len"].get<int>();
    out.push_back(std::move(r));
  }
  if (out.empty()) return llmrt::invalid_argument("--dataset " + path + ": no requests in it");
  return out;
}

/// Arrival offsets (s) of each request: gamma-distributed gaps (Poisson for burstiness 1) at
/// `rate` requests/s; all zero for an infinite rate.
std::vector<double> arrival_times(int n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (!std::isfinite(rate)) return t;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (int i = 1; i < n; ++i) t[static_cast<size_t>(i)] = t[static_cast<size_t>(i - 1)] + gap(rng);
  return t;
}

// ---------------------------------------------------------------------------------------------
// One streaming request

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;  // seconds
  std::vector<double> itl;   // seconds between token-carrying chunks
  int prompt_tokens = 0;
  int output_tokens = 0;
};

/// Incremental Server-Sent Events parser: feeds each event's data (lines joined by '\n').
class SseParser {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_event) {
    buf_.append(data, n);
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {
        if (has_data_) on_event(data_);
        data_.clear();
        has_data_ = false;
      } else if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v[0] == ' ') v.erase(0, 1);
        if (has_data_) data_ += '\n';
        data_ += v;
        has_data_ = true;
      }  // comments (':'), event:, id:, retry: carry nothing we need
    }
  }
  template <typename F>
  void finish(F&& on_event) {
    if (!buf_.empty()) feed("\n", 1, on_event);
    if (has_data_) on_event(data_);
    has_data_ = false;
  }

 private:
  std::string buf_, data_;
  bool has_data_ = false;
};

struct Target {
  Url url;
  std::string endpoint;
  std::string model;
  std::string api_key;
  bool chat = false;
  double timeout = 600;
};

std::unique_ptr<httplib::Client> make_client(const Target& t) {
  auto cli = std::make_unique<httplib::Client>(t.url.host, t.url.port);
  cli->set_connection_timeout(10, 0);
  const time_t secs = static_cast<time_t>(t.timeout);
  cli->set_read_timeout(secs, 0);
  cli->set_write_timeout(secs, 0);
  cli->set_keep_alive(false);
  return cli;
}

RequestResult run_request(const Target& t, const BenchRequest& r) {
  RequestResult res;
  json body = {{"model", t.model}, {"temperature", 0}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}, {"ignore_eos", true}};
  if (t.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", r.prompt}}});
    body["max_completion_tokens"] = r.output_len;
  } else {
    body["prompt"] = r.prompt;
    body["max_tokens"] = r.output_len;
  }
  auto cli = make_client(t);
  httplib::Request req;
  req.method = "POST";
  req.path = t.url.prefix + t.endpoint;
  req.headers = {{"Accept", "text/event-stream"}, {"Content-Type", "application/json"}};
  if (!t.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + t.api_key);
  req.body = body.dump();

  int status = 0;
  std::string error_body;
  SseParser sse;
  bool done = false;
  int chunks = 0;
  std::optional<int> usage_out, usage_in;
  Clock::time_point start, last;
  std::string stream_error;
  auto on_event = [&](const std::string& data) {
    if (!stream_error.empty() || done) return;
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      stream_error = "bad JSON in the stream: " + data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      stream_error = "error in the stream: " + j["error"].dump().substr(0, 300);
      return;
    }
    bool has_token = false;
    if (j.contains("choices") && j["choices"].is_array()) {
      for (const json& c : j["choices"]) {
        const json* text = nullptr;
        if (t.chat && c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content"))
          text = &c["delta"]["content"];
        else if (!t.chat && c.contains("text"))
          text = &c["text"];
        if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) has_token = true;
      }
    }
    if (has_token) {
      const auto now = Clock::now();
      if (chunks == 0) res.ttft = std::chrono::duration<double>(now - start).count();
      else res.itl.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      ++chunks;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
        usage_out = u["completion_tokens"].get<int>();
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
        usage_in = u["prompt_tokens"].get<int>();
    }
  };
  req.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    sse.feed(data, n, on_event);
    return stream_error.empty();
  };

  start = Clock::now();
  httplib::Response response;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli->send(req, response, err);
  const auto end = Clock::now();
  if (status == 200) sse.finish(on_event);
  if (!stream_error.empty()) {
    res.error = stream_error;
  } else if (status != 0 && status != 200) {
    if (error_body.empty()) error_body = response.body;
    while (!error_body.empty() && (error_body.back() == '\n' || error_body.back() == '\r')) error_body.pop_back();
    res.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 500);
  } else if (!sent) {
    res.error = "request failed: " + httplib::to_string(err);
  } else if (!done) {
    res.error = "the stream ended without 'data: [DONE]'";
  } else if (chunks == 0) {
    res.error = "the stream carried no tokens";
  } else {
    res.ok = true;
    res.e2e = std::chrono::duration<double>(end - start).count();
    res.output_tokens = usage_out.value_or(chunks);
    res.prompt_tokens = usage_in.value_or(r.input_len);
  }
  return res;
}

/// The first model of GET /v1/models: its id and, when the server reports it, its vocabulary size.
struct ModelCard {
  std::string id;
  int vocab_size = 0;
};

StatusOr<ModelCard> first_model(const Target& t) {
  auto cli = make_client(t);
  httplib::Headers headers;
  if (!t.api_key.empty()) headers.emplace("Authorization", "Bearer " + t.api_key);
  auto r = cli->Get(t.url.prefix + "/v1/models", headers);
  if (!r) return llmrt::unavailable("cannot reach " + t.url.text() + ": " + httplib::to_string(r.error()));
  if (r->status != 200)
    return llmrt::unavailable("GET /v1/models at " + t.url.text() + " answered HTTP " + std::to_string(r->status) +
                              " (pass --model)");
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    return llmrt::unavailable("GET /v1/models at " + t.url.text() + " lists no model (pass --model)");
  ModelCard card;
  card.id = j["data"][0]["id"].get<std::string>();
  const json& v = j["data"][0].contains("vocab_size") ? j["data"][0]["vocab_size"] : json();
  if (v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() < (int64_t{1} << 31))
    card.vocab_size = v.get<int>();
  return card;
}

/// Polls GET /health until 200 (a server answers 503 while it starts).
Status wait_healthy(const Target& t, ServerProcess& server, double timeout) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  std::string last = "no answer";
  while (Clock::now() < deadline) {
    if (server.exited()) return llmrt::unavailable("llmrt serve exited while starting");
    auto cli = make_client(t);
    if (auto r = cli->Get(t.url.prefix + "/health")) {
      if (r->status == 200) return llmrt::ok_status();
      last = "HTTP " + std::to_string(r->status);
    } else {
      last = httplib::to_string(r.error());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return llmrt::unavailable("llmrt serve is not healthy after " + std::to_string(static_cast<int>(timeout)) +
                            " s (last: " + last + ")");
}

// ---------------------------------------------------------------------------------------------
// Figures

struct Figure {
  std::string key;    // JSON key (vLLM's names)
  std::string label;  // table label
  double value = 0;
  bool integer = false;
};

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

/// Linear interpolation between closest ranks (numpy's default); 0 for no samples.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Section {
  std::string title;
  std::string name;  // "ttft", ...
  std::string upper; // "TTFT", ...
  std::vector<double> samples_ms;
};

struct Report {
  std::vector<Figure> totals;
  std::vector<std::pair<std::string, std::vector<Figure>>> sections;  // title, figures
  std::vector<Figure> extra;                                          // std_*: JSON only
};

Report make_report(const std::vector<RequestResult>& results, double duration) {
  int completed = 0, failed = 0;
  int64_t input = 0, output = 0;
  std::vector<Section> sections = {{"Time to First Token", "ttft", "TTFT", {}},
                                   {"Time per Output Token (excl. 1st token)", "tpot", "TPOT", {}},
                                   {"Inter-token Latency", "itl", "ITL", {}},
                                   {"End-to-end Latency", "e2el", "E2EL", {}}};
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    if (!r.ok) {
      ++failed;
      continue;
    }
    ++completed;
    input += r.prompt_tokens;
    output += r.output_tokens;
    sections[0].samples_ms.push_back(r.ttft * 1e3);
    if (r.output_tokens > 1) sections[1].samples_ms.push_back((r.e2e - r.ttft) / (r.output_tokens - 1) * 1e3);
    for (double g : r.itl) sections[2].samples_ms.push_back(g * 1e3);
    sections[3].samples_ms.push_back(r.e2e * 1e3);
  }
  const double d = duration > 0 ? duration : 1e-9;
  Report rep;
  rep.totals = {{"completed", "Successful requests:", double(completed), true},
                {"failed", "Failed requests:", double(failed), true},
                {"duration", "Benchmark duration (s):", duration, false},
                {"total_input_tokens", "Total input tokens:", double(input), true},
                {"total_output_tokens", "Total generated tokens:", double(output), true},
                {"request_throughput", "Request throughput (req/s):", completed / d, false},
                {"input_throughput", "Input token throughput (tok/s):", input / d, false},
                {"output_throughput", "Output token throughput (tok/s):", output / d, false},
                {"total_token_throughput", "Total Token throughput (tok/s):", (input + output) / d, false}};
  for (const Section& s : sections) {
    std::vector<Figure> f = {
        {"mean_" + s.name + "_ms", "Mean " + s.upper + " (ms):", mean_of(s.samples_ms), false},
        {"median_" + s.name + "_ms", "Median " + s.upper + " (ms):", percentile(s.samples_ms, 50), false},
        {"p90_" + s.name + "_ms", "P90 " + s.upper + " (ms):", percentile(s.samples_ms, 90), false},
        {"p99_" + s.name + "_ms", "P99 " + s.upper + " (ms):", percentile(s.samples_ms, 99), false}};
    rep.sections.emplace_back(s.title, std::move(f));
    rep.extra.push_back({"std_" + s.name + "_ms", "", std_of(s.samples_ms), false});
  }
  return rep;
}

std::string format_value(const Figure& f) {
  char buf[64];
  if (f.integer) std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(std::llround(f.value)));
  else std::snprintf(buf, sizeof(buf), "%.2f", f.value);
  return buf;
}

std::string centered(const std::string& title, char fill) {
  constexpr size_t kWidth = 50;
  if (title.size() >= kWidth) return title;
  const size_t left = (kWidth - title.size()) / 2;
  return std::string(left, fill) + title + std::string(kWidth - title.size() - left, fill);
}

void print_report(const Report& rep, const json* baseline) {
  auto line = [&](const Figure& f) {
    std::string text = f.label;
    text.resize(std::max<size_t>(text.size() + 1, 41), ' ');
    text += format_value(f);
    if (baseline && baseline->contains(f.key) && (*baseline)[f.key].is_number()) {
      const double old = (*baseline)[f.key].get<double>();
      text.resize(std::max<size_t>(text.size() + 2, 56), ' ');
      char buf[96];
      if (old != 0)
        std::snprintf(buf, sizeof(buf), "%+7.1f%% (baseline %.2f)", (f.value - old) / std::fabs(old) * 100.0, old);
      else
        std::snprintf(buf, sizeof(buf), "    n/a  (baseline 0)");
      text += buf;
    } else if (baseline) {
      text.resize(std::max<size_t>(text.size() + 2, 56), ' ');
      text += "    n/a  (not in baseline)";
    }
    std::printf("%s\n", text.c_str());
  };
  std::printf("%s\n", centered(" Serving Benchmark Result ", '=').c_str());
  for (const Figure& f : rep.totals) line(f);
  for (const auto& [title, figures] : rep.sections) {
    std::printf("%s\n", centered(title, '-').c_str());
    for (const Figure& f : figures) line(f);
  }
  std::printf("%s\n", std::string(50, '=').c_str());
  std::fflush(stdout);
}

StatusOr<json> load_baseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) return llmrt::not_found("--baseline " + path + ": cannot open");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return llmrt::invalid_argument("--baseline " + path + ": not a JSON object");
  if (!j.contains("output_throughput") && !j.contains("mean_ttft_ms"))
    return llmrt::invalid_argument("--baseline " + path + ": not a bench-serve --json-out file (no output_throughput)");
  return j;
}

// ---------------------------------------------------------------------------------------------

int run_bench(BenchOptions o, bool num_prompts_given) {
  // Check everything before starting anything.
  if (o.num_prompts < 1) return fail(llmrt::invalid_argument("--num-prompts must be at least 1"));
  double rate = INFINITY;
  if (o.request_rate != "inf") {
    char* end = nullptr;
    rate = std::strtod(o.request_rate.c_str(), &end);
    if (o.request_rate.empty() || *end != '\0' || !(rate > 0) || !std::isfinite(rate))
      return fail(llmrt::invalid_argument("--request-rate: '" + o.request_rate + "' is neither a positive number nor inf"));
  }
  if (!(o.burstiness > 0)) return fail(llmrt::invalid_argument("--burstiness must be positive"));
  if (o.max_concurrency < 0) return fail(llmrt::invalid_argument("--max-concurrency must be >= 0 (0: no limit)"));
  if (o.random_input_len < 1 || o.random_output_len < 1)
    return fail(llmrt::invalid_argument("--random-input-len and --random-output-len must be at least 1"));
  if (!(o.random_range_ratio >= 0 && o.random_range_ratio < 1))
    return fail(llmrt::invalid_argument("--random-range-ratio must be in [0, 1)"));
  if (o.vocab_size < 0) return fail(llmrt::invalid_argument("--vocab-size must be positive"));
  if (!(o.request_timeout > 0) || !(o.ready_timeout > 0))
    return fail(llmrt::invalid_argument("timeouts must be positive"));
  if (o.endpoint.empty() || o.endpoint[0] != '/') o.endpoint = "/" + o.endpoint;
  const bool chat = o.endpoint.find("chat/completions") != std::string::npos;
  if (chat && o.dataset.empty())
    return fail(llmrt::invalid_argument("random token-id prompts need a completions endpoint; use --dataset with "
                                        "text prompts for " + o.endpoint));
  if (o.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.api_key = k;
  json baseline;
  if (!o.baseline.empty()) {
    auto b = load_baseline(o.baseline);
    if (!b.ok()) return fail(b.status());
    baseline = std::move(b).value();
  }
  std::vector<std::string> serve_args;
  if (!o.serve_args.empty()) {
    if (o.plan.empty()) return fail(llmrt::invalid_argument("--serve-args needs --plan"));
    auto a = split_args(o.serve_args);
    if (!a.ok()) return fail(a.status());
    serve_args = std::move(a).value();
  }

  // --plan: resolve a model through the compile cache, learn the vocabulary, start the server.
  ServerProcess server;
  Target target;
  target.endpoint = o.endpoint;
  target.api_key = o.api_key;
  target.chat = chat;
  target.timeout = o.request_timeout;
  if (!o.plan.empty()) {
    llmrt::ModelCacheOptions cache;
    auto plan_path = llmrt::resolve_plan_path(o.plan, cache);
    if (!plan_path.ok()) return fail(plan_path.status());
    if (o.vocab_size == 0) {
      auto plan = llmrt::Plan::open(*plan_path);
      if (!plan.ok()) return fail(plan.status().with_context(*plan_path));
      if ((*plan)->fb().model()) o.vocab_size = (*plan)->fb().model()->vocab_size();
    }
    if (auto s = server.start(*plan_path, serve_args, o.ready_timeout); !s.ok()) return fail(s);
    auto url = parse_url(server.url());
    if (!url.ok()) return fail(url.status());
    target.url = *url;
    if (auto s = wait_healthy(target, server, o.ready_timeout); !s.ok()) return fail(s);
  } else {
    auto url = parse_url(o.url);
    if (!url.ok()) return fail(url.status());
    target.url = *url;
  }
  target.model = o.model;
  if (target.model.empty()) {
    auto m = first_model(target);
    if (!m.ok()) return fail(m.status());
    target.model = m->id;
    if (o.vocab_size == 0) o.vocab_size = m->vocab_size;
  }
  if (o.vocab_size == 0 && o.dataset.empty()) {
    o.vocab_size = 1000;
    std::fprintf(stderr, "llmrt: bench-serve: vocabulary size unknown; random prompt ids are drawn from [0, 1000) "
                         "(set --vocab-size)\n");
  }

  std::vector<BenchRequest> reqs;
  if (!o.dataset.empty()) {
    auto d = dataset_requests(o.dataset, o.vocab_size);
    if (!d.ok()) return fail(d.status());
    const std::vector<BenchRequest>& lines = *d;
    // Requests cycle through the file (a file shorter than --num-prompts repeats).
    if (!num_prompts_given) o.num_prompts = static_cast<int>(lines.size());
    for (int i = 0; i < o.num_prompts; ++i) reqs.push_back(lines[static_cast<size_t>(i) % lines.size()]);
    if (static_cast<size_t>(o.num_prompts) > lines.size())
      std::fprintf(stderr, "llmrt: bench-serve: %s has %zu requests; repeating them for %d prompts\n",
                   o.dataset.c_str(), lines.size(), o.num_prompts);
  } else {
    reqs = random_requests(o);
  }
  const std::vector<double> arrivals = arrival_times(o.num_prompts, rate, o.burstiness, o.seed);

  std::fprintf(stderr, "llmrt: bench-serve: %d requests to %s%s, model %s, request rate %s, max concurrency %s\n",
               o.num_prompts, target.url.text().c_str(), o.endpoint.c_str(), target.model.c_str(),
               o.request_rate.c_str(), o.max_concurrency ? std::to_string(o.max_concurrency).c_str() : "none");

  // Run. One socket per request in flight: lift the open-file limit to what the system allows.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }
  std::vector<RequestResult> results(reqs.size());
  Semaphore slots(o.max_concurrency > 0 ? o.max_concurrency : o.num_prompts);
  Progress progress(o.num_prompts);
  std::vector<std::thread> threads;
  threads.reserve(reqs.size());
  const auto start = Clock::now();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrivals[i])));
    slots.acquire();
    threads.emplace_back([&, i] {
      results[i] = run_request(target, reqs[i]);
      slots.release();
      progress.tick();
    });
  }
  for (std::thread& t : threads) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();
  progress.finish();

  if (!o.plan.empty()) {
    std::string how = server.stop();
    std::fprintf(stderr, "llmrt: bench-serve: llmrt serve stopped (%s)\n", how.c_str());
  }

  int failed = 0;
  const RequestResult* first_failure = nullptr;
  for (const RequestResult& r : results)
    if (!r.ok && !failed++) first_failure = &r;
  if (first_failure)
    std::fprintf(stderr, "llmrt: bench-serve: %d of %d requests failed; first error: %s\n", failed, o.num_prompts,
                 first_failure->error.c_str());

  const Report rep = make_report(results, duration);
  std::printf("Traffic request rate:                    %s\n", o.request_rate.c_str());
  std::printf("Burstiness factor:                       %.2f\n", o.burstiness);
  std::printf("Maximum request concurrency:             %s\n",
              o.max_concurrency ? std::to_string(o.max_concurrency).c_str() : "None");
  timespec res{};
  ::clock_getres(CLOCK_MONOTONIC, &res);
  const double clock_resolution_ns = static_cast<double>(res.tv_sec) * 1e9 + static_cast<double>(res.tv_nsec);
  std::printf("Timer resolution (ns):                   %.0f (steady clock)\n", clock_resolution_ns);
  print_report(rep, o.baseline.empty() ? nullptr : &baseline);

  if (!o.json_out.empty()) {
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::localtime(&now));
    json j = {{"date", date},
              {"backend", "llmrt"},
              {"url", target.url.text()},
              {"endpoint", o.endpoint},
              {"model_id", target.model},
              {"num_prompts", o.num_prompts},
              {"request_rate", std::isfinite(rate) ? json(rate) : json("inf")},
              {"burstiness", o.burstiness},
              {"max_concurrency", o.max_concurrency ? json(o.max_concurrency) : json(nullptr)},
              {"seed", o.seed},
              {"clock_resolution_ns", clock_resolution_ns}};
    if (o.dataset.empty()) {
      j["random_input_len"] = o.random_input_len;
      j["random_output_len"] = o.random_output_len;
      j["random_range_ratio"] = o.random_range_ratio;
    } else {
      j["dataset"] = o.dataset;
    }
    for (const Figure& f : rep.totals) j[f.key] = f.integer ? json(std::llround(f.value)) : json(f.value);
    for (const auto& section : rep.sections)
      for (const Figure& f : section.second) j[f.key] = f.value;
    for (const Figure& f : rep.extra) j[f.key] = f.value;
    json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(), e2els = json::array(),
         errors = json::array();
    for (const RequestResult& r : results) {
      input_lens.push_back(r.prompt_tokens);
      output_lens.push_back(r.output_tokens);
      ttfts.push_back(r.ttft);
      e2els.push_back(r.e2e);
      errors.push_back(r.error);
    }
    j["input_lens"] = input_lens;
    j["output_lens"] = output_lens;
    j["ttfts"] = ttfts;
    j["e2els"] = e2els;
    j["errors"] = errors;
    std::ofstream out(o.json_out);
    out << j.dump(2) << "\n";
    if (!out) return fail(llmrt::internal_error("--json-out " + o.json_out + ": cannot write"));
  }
  return failed ? 2 : 0;
}

}  // namespace

Subcommand add_bench_serve_command(CLI::App& app) {
  auto opts = std::make_shared<BenchOptions>();
  Subcommand s;
  CLI::App* cmd = app.add_subcommand("bench-serve", "serving benchmark against an OpenAI-compatible server "
                                                    "(like vLLM's benchmark_serving)");
  s.app = cmd;
  cmd->footer(
      "Exit status: 0 when every request completed, 2 when some failed (figures still printed),\n"
      "1 on a usage or setup error.");
  CLI::Option* url = cmd->add_option("--url", opts->url, "server base URL (default http://127.0.0.1:8000)");
  cmd->add_option("--plan", opts->plan,
                  "start `llmrt serve PLAN --port 0` (a plan, HF folder or .gguf) for the run, stop it after")
      ->excludes(url);
  cmd->add_option("--serve-args", opts->serve_args, "extra arguments for that `llmrt serve`, e.g. \"--threads 8\"");
  cmd->add_option("--model", opts->model, "model name in requests (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", opts->endpoint, "/v1/completions (default) or /v1/chat/completions (--dataset)");
  cmd->add_option("--api-key", opts->api_key, "bearer token (default: $OPENAI_API_KEY)");
  auto* num_prompts =
      cmd->add_option("--num-prompts", opts->num_prompts, "number of requests (default 1000; with --dataset its length)");
  cmd->add_option("--request-rate", opts->request_rate,
                  "requests per second, Poisson arrivals; inf sends all at once (default inf)");
  cmd->add_option("--burstiness", opts->burstiness,
                  "gamma shape of the arrival gaps: 1 = Poisson, <1 burstier, >1 more regular (default 1)");
  cmd->add_option("--max-concurrency", opts->max_concurrency, "most requests in flight (default: no limit)");
  cmd->add_option("--random-input-len", opts->random_input_len, "prompt tokens per request (default 1024)");
  cmd->add_option("--random-output-len", opts->random_output_len, "output tokens per request (default 128)");
  cmd->add_option("--random-range-ratio", opts->random_range_ratio,
                  "lengths uniform in [len*(1-r), len*(1+r)] (default 0)");
  cmd->add_option("--vocab-size", opts->vocab_size,
                  "random prompt ids are drawn from [0, N) (default: the plan's with --plan, else vocab_size "
                  "in GET /v1/models, else 1000)");
  cmd->add_option("--dataset", opts->dataset, "JSONL file of {\"prompt\": text or [ids], \"output_len\": N}");
  cmd->add_option("--seed", opts->seed, "seed for prompts and arrivals (default 0)");
  cmd->add_option("--json-out", opts->json_out, "write the figures as JSON");
  cmd->add_option("--baseline", opts->baseline, "an earlier --json-out file: print each figure's change");
  cmd->add_option("--request-timeout", opts->request_timeout, "seconds a request may stall (default 600)");
  cmd->add_option("--ready-timeout", opts->ready_timeout, "seconds for --plan's server to start (default 600)");
  s.run = [opts, num_prompts] { return run_bench(*opts, num_prompts->count() > 0); };
  return s;
}

}  // namespace llmrt_tools
