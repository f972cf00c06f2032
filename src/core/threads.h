// The one thread knob. cann-train's own loops (OpenMP) and BLAS (OpenBLAS built on OpenMP)
// share a single pool, so `--threads N` means N busy cores, never N BLAS threads plus N more.
#pragma once

namespace cann {

// Number of online cores of this machine.
int hardware_threads();
// Sets the thread count for OpenMP loops and BLAS; n <= 0 means hardware_threads().
void set_num_threads(int n);
int num_threads();

// Sets the nice value of the calling thread and of the OpenMP workers (the compute threads),
// leaving threads created earlier by others (communication) at theirs: on a machine with no
// core to spare, the scheduler then runs a communication thread as soon as it has work
// instead of sharing the core evenly with compute. Returns how many threads could not be
// changed (lowering priority needs no privilege; raising it back does).
int set_compute_nice(int nice);

// The kernel family OpenBLAS uses ("SkylakeX", "Haswell", ...).
const char* blas_core_name();

}  // namespace cann
