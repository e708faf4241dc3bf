// lamina/parallel.hpp — the one parallel helper of the core.
//
// parallel_for(n_tasks, n_threads, fn) runs fn(task, worker) for task in [0, n_tasks) on up to
// n_threads threads (the calling thread is worker 0). The first exception thrown by any task is
// rethrown in the caller after all workers stop. Tasks are handed out dynamically (atomic
// counter), so uneven tasks balance. Threads are created per call: a call costs ~20-50 us per
// extra thread, so callers use one thread for small work (see `threads_for`).
//
// Thread safety: reentrant; concurrent calls from different threads are independent.
// Never call Python from fn (callers release the GIL around parallel_for).
#pragma once

#include <cstddef>
#include <functional>

namespace lamina {

/// Default number of worker threads: LAMINA_NUM_THREADS if set (>=1), else
/// std::thread::hardware_concurrency(), overridable at runtime with set_num_threads().
int default_num_threads();
/// Set the default worker count (n >= 1; 0 restores the environment/hardware default).
void set_num_threads(int n);

/// Threads worth using for `work` units when one thread should get at least `min_per_thread`.
/// `requested` <= 0 means the default.
int threads_for(std::size_t work, std::size_t min_per_thread, int requested);

void parallel_for(std::size_t n_tasks, int n_threads,
                  const std::function<void(std::size_t task, int worker)>& fn);

}  // namespace lamina
