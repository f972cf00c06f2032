// Deterministic parallel reductions over rows: each thread of an OpenMP team takes one fixed,
// contiguous range of rows, so per-thread partial sums added in thread order give the same
// result on every run with the same thread count, whatever the scheduling.
#pragma once

#include <omp.h>

namespace cann::kernels {

// Calls body(thread, n0, n1) once on every thread of a parallel team, thread t owning rows
// [N*t/T, N*(t+1)/T). Returns T, the team's size (at most omp_get_max_threads()).
template <typename Body>
int parallel_row_ranges(int N, Body&& body) {
  int team = 1;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
#pragma omp single
    team = nth;
    body(tid, static_cast<int>(static_cast<long>(N) * tid / nth),
         static_cast<int>(static_cast<long>(N) * (tid + 1) / nth));
  }
  return team;
}

}  // namespace cann::kernels
