// The one thread knob. cann-train's own loops (OpenMP) and BLAS (OpenBLAS built on OpenMP)
// share a single pool, so `--threads N` means N busy cores, never N BLAS threads plus N more.
#pragma once

#include <ctime>
#include <vector>

namespace cann {

// Number of online cores of this machine.
int hardware_threads();
// Sets the thread count for OpenMP loops and BLAS; n <= 0 means hardware_threads().
void set_num_threads(int n);
int num_threads();
// Runs fn once on each OpenMP worker of the team num_threads() makes, the calling thread (the
// team's thread 0) excepted: for settings that are per thread (priority, signal mask).
void on_openmp_workers(void (*fn)(void*), void* arg);

// Sets the nice value of the calling thread and of the OpenMP workers (the compute threads),
// leaving threads created earlier by others (communication) at theirs: on a machine with no
// core to spare, the scheduler then runs a communication thread as soon as it has work
// instead of sharing the core evenly with compute. Returns how many threads could not be
// changed (lowering priority needs no privilege; raising it back does).
int set_compute_nice(int nice);

// CPU time the compute threads have run: the calling thread and the OpenMP workers (which run
// BLAS too), summed from each thread's CPU clock (pthread_getcpuclockid). Over a step, that
// sum divided by threads x wall time is the fraction of the step the compute threads ran
// kernels; time a thread sleeps waiting (for a collective, for the next parallel region) is
// not in it. libgomp lets an idle worker spin briefly before it sleeps, and that spin counts
// as run time (OMP_WAIT_POLICY=passive removes it). Build it on the training thread after
// set_num_threads; a worker that exited since is left out of the sum.
class ComputeClock {
 public:
  ComputeClock();
  double cpu_seconds() const;
  int threads() const { return static_cast<int>(clocks_.size()); }

 private:
  std::vector<clockid_t> clocks_;
};

}  // namespace cann
