// GEMM and streaming-kernel roofline (see gemm_model.h for the derivation and sources).
#include "plan/gemm_model.h"

#include <algorithm>
#include <cmath>

namespace cann::plan {

double gemm_efficiency(const DeviceSpec& d, double m, double n, double k, double batch) {
  (void)k;  // the k dimension only matters through the memory side of the roofline
  if (m <= 0 || n <= 0 || batch <= 0) return d.gemm_efficiency;
  const double tiles_m = std::ceil(m / kGemmTile), tiles_n = std::ceil(n / kGemmTile);
  const double tile_eff = (m * n) / (tiles_m * tiles_n * kGemmTile * kGemmTile);
  double wave_eff = 1.0;
  if (d.compute_units > 0) {
    const double tiles = tiles_m * tiles_n * batch;
    const double waves = std::ceil(tiles / d.compute_units);
    wave_eff = tiles / (waves * d.compute_units);
  }
  return d.gemm_efficiency * tile_eff * wave_eff;
}

double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * m * n * k * batch;
  const double compute = flops / (d.peak_tflops * 1e12 * gemm_efficiency(d, m, n, k, batch));
  // bf16 operands and result: A (m x k), B (k x n), C (m x n), 2 bytes each.
  const double bytes = 2.0 * (m * k + k * n + m * n) * batch;
  return std::max(compute, stream_seconds(d, bytes));
}

double stream_seconds(const DeviceSpec& d, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / (d.memory_bandwidth_GBps * 1e9 * d.memory_efficiency);
}

}  // namespace cann::plan
