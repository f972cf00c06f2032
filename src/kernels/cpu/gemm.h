// The GEMM every linear layer runs: row-major C(M,N) = op(A)(M,K) op(B)(K,N) + beta C, in the
// run's precision. fp32 goes to oneDNN's sgemm; bf16 rounds A and B to bfloat16 (nearest
// even) and multiplies them with oneDNN's bf16 matmul, accumulating in fp32 into an fp32 C:
// the inputs lose precision, the sums and everything kept between steps (weights, gradients,
// optimizer state) do not. The precision is process-wide: a run sets it once, before training.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace cann::kernels {

enum class GemmPrecision { kFp32, kBf16 };

// "fp32" or "bf16". bf16 needs AVX-512 BF16 (as oneDNN finds the processor): without it the
// conversion path would run at a fraction of fp32's speed, so it is refused.
StatusOr<GemmPrecision> parse_gemm_precision(std::string_view text);
const char* precision_name(GemmPrecision p);
// Whether this processor multiplies bf16 natively (AVX-512 BF16).
bool cpu_has_bf16();

void set_gemm_precision(GemmPrecision p);
GemmPrecision gemm_precision();
// bf16 matmul primitives this thread has made (one per padded shape; gemm.cc).
size_t bf16_primitives();
// Drops this thread's bf16 primitives and staging buffers and empties oneDNN's primitive
// cache, so a process that only measured bf16 GEMMs holds no more than an fp32 one (the next
// bf16 GEMM makes its primitive again).
void release_bf16_gemm_state();

// lda, ldb, ldc: floats between rows of A, B, C as stored (A is (K,M) when ta).
void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc);

// Round-to-nearest-even bfloat16 of each of n floats (the bits of a bf16 are the upper half of
// the float's); NaN stays NaN.
void to_bf16(uint16_t* dst, const float* src, size_t n);

}  // namespace cann::kernels
