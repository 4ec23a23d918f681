#include "runtime/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LLMRT_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define LLMRT_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define LLMRT_CPU_RELAX() ((void)0)
#endif

namespace llmrt {
namespace {

constexpr int kMaxThreads = 0xFFFF;  // the chunk fields of the job word are 16 bits

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

inline uint64_t job_word(uint64_t id, uint64_t chunks, uint64_t next) {
  return id << 32 | chunks << 16 | next;
}
inline int chunks_of(uint64_t w) { return static_cast<int>((w >> 16) & 0xFFFF); }
inline int next_of(uint64_t w) { return static_cast<int>(w & 0xFFFF); }

}  // namespace

int available_cpus() {
  const size_t n = affinity_cpus().size();
  if (n > 0) return static_cast<int>(n);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

ThreadPool::ThreadPool(const Options& options) {
  num_threads_ = std::clamp(options.threads > 0 ? options.threads : available_cpus(), 1, kMaxThreads);
  spin_us_ = std::max(options.spin_us, 0);
  if (options.pin) {
    cpus_ = affinity_cpus();
    pinned_ = !cpus_.empty();
  }
  if (pinned_) pin_to(0);
  threads_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    job_.store(job_word((job_.load() >> 32) + 1, 0, 0));
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::pin_to(int index) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus_[static_cast<size_t>(index) % cpus_.size()], &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort: a refusal leaves the thread unpinned
}

bool ThreadPool::work(int index) {
  bool ran = false;
  uint64_t w = job_.load(std::memory_order_acquire);
  while (next_of(w) < chunks_of(w)) {
    if (!job_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // w reloaded: another thread claimed, or a new job was published
    // The claimed chunk keeps the caller waiting, so fn_/ctx_/n_ stay those of this job.
    const int64_t chunks = chunks_of(w), c = next_of(w);
    const int64_t begin = n_ * c / chunks, end = n_ * (c + 1) / chunks;
    if (begin < end) fn_(ctx_, begin, end, index);
    done_.fetch_add(1, std::memory_order_release);
    ran = true;
    w = job_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::run(int64_t n, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  const int chunks = n < num_threads_ ? static_cast<int>(n) : num_threads_;
  if (chunks == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t id = (job_.load(std::memory_order_relaxed) >> 32) + 1;
  job_.store(job_word(id, static_cast<uint64_t>(chunks), 0), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  work(0);
  // Every chunk is claimed; the ones other threads run are running, so this wait is short
  // unless such a thread was preempted, and then yielding gives its CPU back.
  for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
    if (spins < 4096) LLMRT_CPU_RELAX();
    else sched_yield();
  }
}

void ThreadPool::worker_main(int index) {
  if (pinned_) pin_to(index);
  using Clock = std::chrono::steady_clock;
  for (;;) {
    if (work(index)) continue;
    if (stop_.load(std::memory_order_acquire)) return;
    // Nothing to claim: watch the job word for a while, then sleep until it changes.
    const uint64_t seen = job_.load(std::memory_order_acquire);
    if (next_of(seen) < chunks_of(seen)) continue;
    const Clock::time_point until = Clock::now() + std::chrono::microseconds(spin_us_);
    bool changed = false;
    for (int spins = 1; !changed; ++spins) {
      LLMRT_CPU_RELAX();
      changed = job_.load(std::memory_order_relaxed) != seen;
      if (!changed && spins % 128 == 0) {
        if (Clock::now() >= until) break;
        if (spins >= 2048) sched_yield();  // past the first microseconds, let others run
      }
    }
    if (changed) continue;
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return job_.load(std::memory_order_seq_cst) != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace llmrt
