// GEMM and streaming-kernel roofline (see gemm_model.h for the derivation and sources).
#include "plan/gemm_model.h"

#include <algorithm>
#include <cmath>

namespace cann::plan {

double efficiency_at_min_dim(const std::vector<std::pair<double, double>>& table, double dim) {
  if (table.empty()) return 1.0;
  if (dim <= table.front().first) return table.front().second;
  if (dim >= table.back().first) return table.back().second;
  for (size_t i = 1; i < table.size(); ++i) {
    if (dim > table[i].first) continue;
    const double t =
        std::log2(dim / table[i - 1].first) / std::log2(table[i].first / table[i - 1].first);
    return table[i - 1].second + t * (table[i].second - table[i - 1].second);
  }
  return table.back().second;
}

double gemm_efficiency(const DeviceSpec& d, double m, double n, double k, double batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return d.gemm_efficiency;
  // A library without output tiles: every row and column computed is useful, and one tile of
  // the whole output makes the wave model below a no-op.
  const double tile_m = d.gemm_tile > 0 ? d.gemm_tile : m,
               tile_n = d.gemm_tile > 0 ? d.gemm_tile : n;
  const double tiles_m = std::ceil(m / tile_m), tiles_n = std::ceil(n / tile_n);
  const double tile_eff = (m * n) / (tiles_m * tiles_n * tile_m * tile_n);
  double wave_eff = 1.0;
  if (d.compute_units > 0) {
    const double tiles = tiles_m * tiles_n * batch;
    const double waves = std::ceil(tiles / d.compute_units);
    wave_eff = tiles / (waves * d.compute_units);
  }
  const double thin =
      k > 0 ? efficiency_at_min_dim(d.gemm_efficiency_by_min_dim, std::min({m, n, k})) : 1.0;
  return d.gemm_efficiency * tile_eff * wave_eff * thin;
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

double elementwise_seconds(const DeviceSpec& d, double bytes) {
  if (d.elementwise_GBps <= 0) return stream_seconds(d, bytes);
  return bytes > 0 ? bytes / (d.elementwise_GBps * 1e9) : 0;
}

}  // namespace cann::plan
