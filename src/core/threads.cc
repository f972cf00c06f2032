// Thread-count plumbing for OpenMP and OpenBLAS.
#include "core/threads.h"

#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

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

const char* blas_core_name() { return openblas_get_corename(); }

int set_compute_nice(int nice) {
  int failures = 0;
  auto lower = [&] {
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    if (setpriority(PRIO_PROCESS, tid, nice) != 0) {
#pragma omp atomic
      ++failures;
    }
  };
  lower();
#pragma omp parallel num_threads(num_threads())
  {
    if (omp_get_thread_num() != 0) lower();
  }
  return failures;
}

}  // namespace cann
