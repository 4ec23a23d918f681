// A small fork-join thread pool for the CPU backend. Owned by whoever runs kernels (the executor)
// and passed to kernels explicitly; never global.
//
// parallel_for(n, f) splits [0, n) into at most num_threads() contiguous chunks and calls
// f(begin, end, worker) once per non-empty chunk; `worker` is the index of the thread running it
// (0 = the calling thread), unique among the chunks running at the same time, so kernels may index
// per-thread scratch with it. Kernels split rows / columns / heads with it, never a reduction, so
// results do not depend on the thread count.
//
// Why not a condition variable per job: a decode step of a small model is ~150 jobs of a few
// microseconds each, and waking a sleeping thread costs tens of microseconds on these machines.
// So the chunks of a job are claimed from one atomic word by whichever threads are running (the
// caller included): an idle worker spins briefly (Options::spin_us) watching that word before it
// sleeps on a condition variable, and a worker that is descheduled (an oversubscribed machine)
// simply claims nothing, so the caller never waits for a thread that has not started.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace llmrt {

/// CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();

class ThreadPool {
 public:
  struct Options {
    int threads = 0;    // counts the calling thread; 0: available_cpus()
    bool pin = false;   // pin thread i to the i-th CPU of the affinity mask (the caller too)
    int spin_us = 200;  // how long an idle worker watches for work before it sleeps
  };
  explicit ThreadPool(int num_threads) : ThreadPool(Options{.threads = num_threads}) {}
  explicit ThreadPool(const Options& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  bool pinned() const { return pinned_; }

  template <typename F>
  void parallel_for(int64_t n, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(n, [](void* ctx, int64_t b, int64_t e, int w) { (*static_cast<Fn*>(ctx))(b, e, w); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  using Trampoline = void (*)(void*, int64_t, int64_t, int);
  void run(int64_t n, Trampoline fn, void* ctx);
  void worker_main(int index);
  // Claims and runs chunks of the published job until none is left; returns whether it ran any.
  bool work(int index);
  void pin_to(int index);

  int num_threads_ = 1;
  int spin_us_ = 0;
  bool pinned_ = false;
  std::vector<int> cpus_;
  std::vector<std::thread> threads_;

  // The job word: bits 63..32 job id, 31..16 chunk count, 15..0 next unclaimed chunk. Written by
  // the caller to publish a job (after fn_/ctx_/n_), advanced by compare-exchange to claim.
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int> done_{0};  // chunks of the current job finished
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  Trampoline fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace llmrt
