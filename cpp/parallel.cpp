#include "lamina/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina {

namespace {
std::atomic<int> g_num_threads{0};

// LAMINA_NUM_THREADS, else the hardware threads: read once (hardware_concurrency() costs a
// system call, a few µs, which every small kernel call with the default thread count paid).
int env_or_hw_threads() {
  static const int n = [] {
    if (const char* s = std::getenv("LAMINA_NUM_THREADS")) {
      const int v = std::atoi(s);
      if (v >= 1) return v;
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return n;
}
}  // namespace

int default_num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  return n >= 1 ? n : env_or_hw_threads();
}

void set_num_threads(int n) { g_num_threads.store(n < 0 ? 0 : n, std::memory_order_relaxed); }

int threads_for(std::size_t work, std::size_t min_per_thread, int requested) {
  int t = requested > 0 ? requested : default_num_threads();
  if (min_per_thread == 0) min_per_thread = 1;
  std::size_t useful = work / min_per_thread;
  if (useful < 1) useful = 1;
  if (static_cast<std::size_t>(t) > useful) t = static_cast<int>(useful);
  return std::max(t, 1);
}

void parallel_for(std::size_t n_tasks, int n_threads,
                  const std::function<void(std::size_t, int)>& fn) {
  if (n_tasks == 0) return;
  if (n_threads > static_cast<int>(n_tasks)) n_threads = static_cast<int>(n_tasks);
  if (n_threads <= 1) {
    for (std::size_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex err_mu;
  auto worker = [&](int w) {
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_tasks) return;
      try {
        fn(i, w);
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!first_error) first_error = std::current_exception();
        failed.store(true);
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n_threads - 1);
  for (int w = 1; w < n_threads; ++w) threads.emplace_back(worker, w);
  worker(0);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace lamina
