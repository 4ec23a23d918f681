// A small fork-join thread pool for the CPU backend. Owned by whoever runs kernels (the executor)
// and passed to kernels explicitly; never global.
//
// parallel_for(n, f) splits [0, n) into at most num_threads() contiguous chunks and calls
// f(begin, end, worker) once per non-empty chunk, worker in [0, num_threads()). The calling thread
// runs chunk 0. Kernels split rows / columns / heads with it, never a reduction, so results do not
// depend on the thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace llmrt {

class ThreadPool {
 public:
  /// `num_threads` counts the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

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
  void run_chunk(int index);

  int num_threads_ = 1;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  Trampoline fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
};

}  // namespace llmrt
