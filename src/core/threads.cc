// Thread-count plumbing for OpenMP and OpenBLAS.
#include "core/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" void openblas_set_num_threads(int num_threads);

namespace cann {
namespace {
int g_threads = 0;
}

int hardware_threads() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void set_num_threads(int n) {
  if (n <= 0) n = hardware_threads();
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() {
  return g_threads > 0 ? g_threads : hardware_threads();
}

ComputeClock::ComputeClock() {
  // Index t: OpenMP thread t of this thread's team; thread 0 is the calling thread.
  std::vector<clockid_t> clocks(num_threads(), clockid_t{});
  std::vector<char> found(clocks.size(), 0);
  found[0] = pthread_getcpuclockid(pthread_self(), &clocks[0]) == 0;
#pragma omp parallel num_threads(num_threads())
  {
    const int t = omp_get_thread_num();
    if (t != 0) found[t] = pthread_getcpuclockid(pthread_self(), &clocks[t]) == 0;
  }
  for (size_t t = 0; t < clocks.size(); ++t)
    if (found[t]) clocks_.push_back(clocks[t]);
}

double ComputeClock::cpu_seconds() const {
  double sum = 0.0;
  for (clockid_t c : clocks_) {
    timespec ts{};
    if (clock_gettime(c, &ts) == 0) sum += static_cast<double>(ts.tv_sec) + 1e-9 * ts.tv_nsec;
  }
  return sum;
}

void on_openmp_workers(void (*fn)(void*), void* arg) {
#pragma omp parallel num_threads(num_threads())
  {
    if (omp_get_thread_num() != 0) fn(arg);
  }
}

int set_compute_nice(int nice) {
  struct Args {
    int nice;
    int failures = 0;
  } a{nice};
  auto lower = [](void* p) {
    Args& args = *static_cast<Args*>(p);
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    if (setpriority(PRIO_PROCESS, tid, args.nice) != 0) {
#pragma omp atomic
      ++args.failures;
    }
  };
  lower(&a);
  on_openmp_workers(lower, &a);
  return a.failures;
}

}  // namespace cann
