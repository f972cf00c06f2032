// sgemm_peak: the machine's measured fp32 GEMM throughput through the same OpenBLAS (OpenMP
// build) cann-train uses, as the denominator of "share of peak" in the training benchmarks.
// Prints one JSON object: {"threads": N, "gflops": best, "shapes": [...]}.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/threads.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  cann::set_num_threads(threads);
  struct Shape {
    int m, n, k;
  };
  // A large square GEMM and the shapes of the benchmark GPT's projections (2048 tokens).
  const Shape shapes[] = {
      {2048, 2048, 2048}, {2048, 1152, 384}, {2048, 1536, 384}, {2048, 384, 1536}};
  double best = 0.0;
  std::printf("{\"threads\": %d, \"shapes\": [", cann::num_threads());
  bool first = true;
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f),
        b(static_cast<size_t>(s.k) * s.n, 0.25f), c(static_cast<size_t>(s.m) * s.n);
    auto run = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                  b.data(), s.k, 0.0f, c.data(), s.n);
    };
    run();
    // Validate before timing: every entry is k * 0.5 * 0.25.
    if (c[0] != s.k * 0.125f || c.back() != s.k * 0.125f) {
      std::fprintf(stderr, "sgemm_peak: wrong GEMM result\n");
      return 1;
    }
    const int reps = std::max(3, static_cast<int>(2e10 / (2.0 * s.m * s.n * s.k)));
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) run();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gflops = 2.0 * s.m * s.n * s.k * reps / dt / 1e9;
    best = std::max(best, gflops);
    std::printf("%s{\"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.1f}", first ? "" : ", ", s.m,
                s.n, s.k, gflops);
    first = false;
  }
  std::printf("], \"gflops\": %.1f}\n", best);
  return 0;
}
