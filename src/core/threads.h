// The one thread knob. cann-train's own loops (OpenMP) and BLAS (OpenBLAS built on OpenMP)
// share a single pool, so `--threads N` means N busy cores, never N BLAS threads plus N more.
#pragma once

namespace cann {

// Number of online cores of this machine.
int hardware_threads();
// Sets the thread count for OpenMP loops and BLAS; n <= 0 means hardware_threads().
void set_num_threads(int n);
int num_threads();

// The kernel family OpenBLAS uses ("SkylakeX", "Haswell", ...).
const char* blas_core_name();

}  // namespace cann
