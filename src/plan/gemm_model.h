// How long a GEMM or a memory-bound kernel takes on one device: the planner's compute clock.
//
// GEMM efficiency is a function of the GEMM's shape and the device, not one constant:
//
//   efficiency(m, n, k) = gemm_efficiency(device) * tile_quantization * wave_quantization
//   seconds = max(2*m*n*k / (peak * efficiency),  bytes moved / achievable HBM bandwidth)
//
// - gemm_efficiency is the best fraction of peak a device reaches on large, well-shaped bf16
//   GEMMs ("maximum achievable matmul FLOPS", Bekman, Machine Learning Engineering, 2024:
//   A100 SXM 267.9 of 312 TFLOP/s = 0.859, H100 SXM 792.1 of 989 = 0.801).
// - tile quantization: the kernel computes whole 128x128 output tiles (the CUTLASS/cuBLAS bf16
//   tile for sm80/sm90), so m = 2100 pays for ceil(2100/128) = 17 tiles = 2176 rows (0.965).
// - wave quantization: tiles run in waves of compute_units (SMs, AI cores) at a time; 576
//   tiles on 108 SMs take ceil(576/108) = 6 waves, of which 576/648 = 0.889 is useful (NVIDIA,
//   "Matrix Multiplication Background User's Guide", wave quantization).
// - the roofline (Williams et al. 2009) makes thin GEMMs memory bound: attention's Q*K^T with
//   head size 128 moves 2*(2*s*d + s*s) bytes for 2*s*s*d FLOPs, 114 FLOP/byte at s = 2048,
//   below the A100's ridge of 312e12/2039e9 = 153 FLOP/byte.
// Split-K, stream-K and smaller-tile heuristics that libraries use for small problems are not
// modelled, so small GEMMs come out slightly pessimistic.
//
// A CPU's BLAS (oneDNN's sgemm for the engine) has no output tile of that size: it blocks a
// few rows and columns in registers, and on a thin GEMM loses to packing and loop overhead
// instead. A calibrated CPU device (`bench calibrate`) has gemm_tile 0 and its measured
// efficiency by the GEMM's smallest dimension (gemm_efficiency_by_min_dim, piecewise linear in
// log2 of the dimension, held at the ends) in place of tile and wave quantization.
#pragma once

#include "plan/cluster.h"

namespace cann::plan {

inline constexpr double kGemmTile = 128;

// The measured efficiency of `table` (dimension, fraction) at a GEMM whose smallest
// dimension is `dim`; 1 for an empty table.
double efficiency_at_min_dim(const std::vector<std::pair<double, double>>& table, double dim);
// Fraction of peak for `batch` independent (m x k) * (k x n) GEMMs, compute side only.
double gemm_efficiency(const DeviceSpec& d, double m, double n, double k, double batch = 1);
// Seconds for `batch` independent bf16 GEMMs (m x k) * (k x n), roofline of compute and memory.
double gemm_seconds(const DeviceSpec& d, double m, double n, double k, double batch = 1);
// Seconds for a kernel that streams `bytes` through HBM (the optimizer step, and the
// elementwise kernels below where the device has no rate of their own): bytes /
// (memory_bandwidth * memory_efficiency).
double stream_seconds(const DeviceSpec& d, double bytes);
// Seconds for an elementwise kernel of the layers (layernorm, softmax, dropout, GeLU, residual
// add) counted at `bytes`: at device.elementwise_GBps where measured, else stream_seconds.
double elementwise_seconds(const DeviceSpec& d, double bytes);

}  // namespace cann::plan
