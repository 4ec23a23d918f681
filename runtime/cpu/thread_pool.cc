#include "runtime/cpu/thread_pool.h"

namespace llmrt {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    unsigned hw = std::thread::hardware_concurrency();
    num_threads = hw == 0 ? 1 : static_cast<int>(hw);
  }
  num_threads_ = num_threads;
  threads_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunk(int index) {
  int64_t begin = n_ * index / chunks_;
  int64_t end = n_ * (index + 1) / chunks_;
  if (begin < end) fn_(ctx_, begin, end, index);
}

void ThreadPool::run(int64_t n, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  int chunks = n < num_threads_ ? static_cast<int>(n) : num_threads_;
  if (chunks == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  run_chunk(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker_main(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= chunks_) continue;  // this job has fewer chunks than threads
    lock.unlock();
    run_chunk(index);
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

}  // namespace llmrt
