// gemm(): oneDNN's sgemm for fp32; for bf16 A is rounded into a per-thread scratch buffer,
// packed (row strides dropped), B is rounded by a oneDNN reorder straight into the blocked
// layout the matmul reads, and oneDNN's matmul multiplies them with fp32 accumulation, adding
// beta * C through its sum post-op. Primitives are cached per shape: a
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

#include <algorithm>
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

// rows x cols floats at stride ld into bf16 rows dst_ld apart (dst_ld >= cols).
void pack_bf16(uint16_t* dst, int dst_ld, const float* src, int rows, int cols, int ld) {
  const size_t total = static_cast<size_t>(rows) * cols;
#pragma omp parallel for schedule(static) if (total > (1 << 16))
  for (int r = 0; r < rows; ++r)
    to_bf16(dst + static_cast<size_t>(r) * dst_ld, src + static_cast<size_t>(r) * ld, cols);
}

// A matmul and, when K needs no padding, the reorder that rounds fp32 B straight into the
// blocked bf16 layout the matmul reads (one pass over B instead of two: packing into a plain
// bf16 copy, which the matmul then copied into its blocks on every call).
struct Bf16Primitive {
  dnnl::matmul matmul;
  dnnl::reorder reorder_b;  // empty: B is packed plain by pack_bf16
  dnnl::memory::desc b_from, b_to;
};

struct Bf16Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // (M, N, K, ta, tb, ldb, ldc, beta) -> primitives
  std::map<std::tuple<int, int, int, bool, bool, int, int, float>, Bf16Primitive> cache;
  std::vector<uint16_t> a, b;
  std::vector<float> c;  // the rows of a padded C
};

Bf16Engine& bf16_engine() {
  // One per thread: a GEMM may run inside another kernel's parallel region.
  thread_local Bf16Engine e;
  return e;
}

// rows x cols floats from rows ld_src apart to rows ld_dst apart.
void copy_rows(float* dst, int ld_dst, const float* src, int ld_src, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * ld_dst, src + static_cast<size_t>(r) * ld_src,
                sizeof(float) * cols);
}

// The extent a primitive is made for: M and K rounded up (to 64 up to 1024, to 256 above).
// A model's dense GEMMs have extents that are already multiples, so they run unpadded; an MoE
// expert's rows (its token count) change every step, and a primitive per count would compile
// a new kernel each time and keep them all (a 20-step bf16 MoE run held 45 MiB more than
// fp32 and gained no speed). Padded rows and columns are zeros, so they add nothing.
int bucket(int x) {
  const int step = x <= 1024 ? 64 : 256;
  return (x + step - 1) / step * step;
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc) {
  Bf16Engine& e = bf16_engine();
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const int Mp = bucket(M), Kp = bucket(K);
  const bool direct_b = Kp == K;
  // Rows past M are computed into a scratch C and dropped.
  float* out = C;
  int ldo = ldc;
  if (Mp != M) {
    e.c.resize(static_cast<size_t>(Mp) * N);
    out = e.c.data();
    ldo = N;
    if (beta != 0.0f) copy_rows(out, N, C, ldc, M, N);
  }
  const dnnl::memory::desc a_md({Mp, Kp}, dt::bf16, ta ? dims{1, Mp} : dims{Kp, 1});
  const dnnl::memory::desc c_md({Mp, N}, dt::f32, dims{ldo, 1});
  const auto key = std::make_tuple(Mp, N, Kp, ta, tb, direct_b ? ldb : 0, ldo, beta);
  auto it = e.cache.find(key);
  if (it == e.cache.end()) {
    Bf16Primitive p;
    p.b_to = direct_b ? dnnl::memory::desc({Kp, N}, dt::bf16, dnnl::memory::format_tag::any)
                      : dnnl::memory::desc({Kp, N}, dt::bf16, tb ? dims{1, Kp} : dims{N, 1});
    dnnl::primitive_attr attr;
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, p.b_to, c_md), attr, e.engine);
    p.matmul = dnnl::matmul(pd);
    if (direct_b) {
      p.b_to = pd.weights_desc();
      // B as stored: (K, N) rows ldb apart, or (N, K) rows ldb apart when tb.
      p.b_from = dnnl::memory::desc({K, N}, dt::f32, tb ? dims{1, ldb} : dims{ldb, 1});
      p.reorder_b =
          dnnl::reorder(dnnl::reorder::primitive_desc(e.engine, p.b_from, e.engine, p.b_to));
    }
    it = e.cache.emplace(key, std::move(p)).first;
  }
  const Bf16Primitive& p = it->second;
  // A (Mp,Kp), or (Kp,Mp) when ta, as stored, each stored row at the padded row length; the
  // padding zeros.
  e.a.resize(static_cast<size_t>(Mp) * Kp);
  if (Mp != M || Kp != K) std::fill(e.a.begin(), e.a.end(), uint16_t{0});
  pack_bf16(e.a.data(), ta ? Mp : Kp, A, ta ? K : M, ta ? M : K, lda);
  if (direct_b) {
    e.b.resize((p.b_to.get_size() + 1) / 2);
    dnnl::memory from(p.b_from, e.engine, const_cast<float*>(B)), to(p.b_to, e.engine, e.b.data());
    p.reorder_b.execute(e.stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  } else {
    // B (Kp,N), or (N,Kp) when tb, as stored; the padding zeros.
    e.b.assign(static_cast<size_t>(Kp) * N, uint16_t{0});
    pack_bf16(e.b.data(), tb ? Kp : N, B, tb ? N : K, tb ? K : N, ldb);
  }
  dnnl::memory am(a_md, e.engine, e.a.data()), bm(p.b_to, e.engine, e.b.data()),
      cm(c_md, e.engine, out);
  p.matmul.execute(e.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  e.stream.wait();
  if (out != C) copy_rows(C, ldc, out, N, M, N);
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

const char* precision_name(GemmPrecision p) {
  return p == GemmPrecision::kBf16 ? "bf16" : "fp32";
}

bool cpu_has_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

void set_gemm_precision(GemmPrecision p) {
  g_precision.store(p);
}

size_t bf16_primitives() {
  return bf16_engine().cache.size();
}

void release_bf16_gemm_state() {
  Bf16Engine& e = bf16_engine();
  e.cache.clear();
  std::vector<uint16_t>().swap(e.a);
  std::vector<uint16_t>().swap(e.b);
  std::vector<float>().swap(e.c);
  // The library keeps every primitive made through its API in a cache of its own as well.
  const int capacity = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(capacity);
}
GemmPrecision gemm_precision() {
  return g_precision.load();
}

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
