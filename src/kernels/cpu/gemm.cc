// gemm(): oneDNN's sgemm for fp32; for bf16 the operands are rounded into per-thread scratch
// buffers, packed (row strides dropped), and oneDNN's matmul multiplies them with fp32
// accumulation, adding beta * C through its sum post-op. Primitives are cached per shape: a
// model runs a handful of shapes, step after step.
//
// Why oneDNN's sgemm and not OpenBLAS's for fp32: measured on the models' shapes with two
// threads (bench/gemm, docs/benchmarks.md) it reaches 94-97% of the FMA peak where OpenBLAS
// reaches 85-89% (and 55-72% on gpt_tiny's narrow shapes), losing only on the 2048x384x1536
// forward (75% against 85%); end to end the benchmark GPT's fp32 step went from 763-863 ms to
// 721-727 ms, with less spread. Attention's block GEMMs use oneDNN's sgemm too (attention.cc).
#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "core/check.h"

namespace cann::kernels {
namespace {

std::atomic<GemmPrecision> g_precision{GemmPrecision::kFp32};

uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// rows x cols floats at stride ld into a packed rows x cols bf16 buffer.
void pack_bf16(uint16_t* dst, const float* src, int rows, int cols, int ld) {
  const size_t total = static_cast<size_t>(rows) * cols;
#pragma omp parallel for schedule(static) if (total > (1 << 16))
  for (int r = 0; r < rows; ++r)
    to_bf16(dst + static_cast<size_t>(r) * cols, src + static_cast<size_t>(r) * ld, cols);
}

struct Bf16Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // (M, N, K, ta, tb, ldc, beta) -> primitive
  std::map<std::tuple<int, int, int, bool, bool, int, float>, dnnl::matmul> cache;
  std::vector<uint16_t> a, b;
};

Bf16Engine& bf16_engine() {
  // One per thread: a GEMM may run inside another kernel's parallel region.
  thread_local Bf16Engine e;
  return e;
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc) {
  Bf16Engine& e = bf16_engine();
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  e.a.resize(static_cast<size_t>(M) * K);
  e.b.resize(static_cast<size_t>(K) * N);
  // Packed as stored: A is (M,K), or (K,M) when ta; B is (K,N), or (N,K) when tb.
  pack_bf16(e.a.data(), A, ta ? K : M, ta ? M : K, lda);
  pack_bf16(e.b.data(), B, tb ? N : K, tb ? K : N, ldb);
  const dnnl::memory::desc a_md({M, K}, dt::bf16, ta ? dims{1, M} : dims{K, 1});
  const dnnl::memory::desc b_md({K, N}, dt::bf16, tb ? dims{1, K} : dims{N, 1});
  const dnnl::memory::desc c_md({M, N}, dt::f32, dims{ldc, 1});
  const auto key = std::make_tuple(M, N, K, ta, tb, ldc, beta);
  auto it = e.cache.find(key);
  if (it == e.cache.end()) {
    dnnl::primitive_attr attr;
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    it = e.cache
             .emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(
                               dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine)))
             .first;
  }
  dnnl::memory am(a_md, e.engine, e.a.data()), bm(b_md, e.engine, e.b.data()),
      cm(c_md, e.engine, C);
  it->second.execute(e.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  e.stream.wait();
}

}  // namespace

StatusOr<GemmPrecision> parse_gemm_precision(std::string_view text) {
  if (text == "fp32") return GemmPrecision::kFp32;
  if (text != "bf16")
    return InvalidArgument("--precision: unknown precision '" + std::string(text) +
                           "'; hint: use fp32 or bf16");
  if (!cpu_has_bf16())
    return InvalidArgument(
        "--precision bf16: this processor has no AVX-512 BF16 instructions, so bf16 GEMMs "
        "would run slower than fp32; hint: use --precision fp32");
  return GemmPrecision::kBf16;
}

const char* precision_name(GemmPrecision p) { return p == GemmPrecision::kBf16 ? "bf16" : "fp32"; }

bool cpu_has_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

void set_gemm_precision(GemmPrecision p) { g_precision.store(p); }
GemmPrecision gemm_precision() { return g_precision.load(); }

void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (gemm_precision() == GemmPrecision::kBf16 && K > 0) {
    gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Row-major, as its documentation says of dnnl_sgemm.
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  CANN_CHECK(st == dnnl_success) << "dnnl_sgemm failed (status " << static_cast<int>(st) << ")";
}

void to_bf16(uint16_t* dst, const float* src, size_t n) {
  size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    std::memcpy(dst + i, &h, sizeof(h));
  }
#endif
  for (; i < n; ++i) dst[i] = round_bf16(src[i]);
}

}  // namespace cann::kernels
