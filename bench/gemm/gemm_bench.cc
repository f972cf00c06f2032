// gemm_bench: this machine's FMA peak, measured with pure register loops, and every GEMM shape
// the shipped models train with as a fraction of it, through each GEMM library Debian offers
// here: OpenBLAS (the engine's today), oneDNN's sgemm, and oneDNN's bf16 matmul (bf16 inputs,
// fp32 accumulation and output).
//
//   peak: T threads (an OpenMP team), each running 12 independent FMA chains in registers:
//         256-bit vfmadd (AVX2), 512-bit vfmadd (AVX-512F), 512-bit vdpbf16ps (AVX-512 BF16,
//         2 multiply-adds per fp32 lane); best of 5 runs. FLOPs: 2 per multiply-add.
//   GEMM: each shape in the form a linear layer runs it (forward x w^T "NT", input gradient
//         dy w "NN", weight gradient dy^T x "TN"); each result is checked first against a
//         double-precision reference at 256 sampled entries (bf16: of the bf16-rounded
//         inputs), then timed 3 times per library, the libraries taking turns, each timing
//         half a second or more; the median is reported with the range; 2 m n k FLOPs per call.
//
// A fourth column times the engine's own bf16 GEMM as a training step calls it
// (kernels::gemm at --precision bf16): fp32 operands in, rounded to bf16 on each call (A into a
// packed copy, B by a oneDNN reorder straight into the matmul's blocked layout), fp32 out, so
// its figure includes the rounding that the oneDNN column, fed bf16 operands, leaves out.
//
// Prints the table (or with --json one object); exit 1 when a check fails or when neither a
// library nor the engine's GEMM reaches 80% of the peak of its precision on the largest
// shape.
//
//   build/bench/gemm_bench [--threads T] [--json] [--peak-only]
//
// --peak-only measures and prints the peaks alone (one JSON object), for drivers that report
// a share of peak.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 12 chains of `iters` dependent operations each; the result keeps them alive.
__attribute__((target("avx2,fma"))) float fma_avx2(long iters) {
  __m256 acc[12];
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f"))) float fma_avx512(long iters) {
  __m512 acc[12];
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float dot_bf16(long iters) {
  __m512 acc[12];
  // bf16 1.0 and a small value, as 32 pairs per register.
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));
  const __m512bh c = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], b, c);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

// GFLOP/s of `threads` threads each running fn; flop_per_iter per thread per iteration.
double peak(float (*fn)(long), double flop_per_iter, int threads) {
  const long iters = 20000000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    float sink = 0;
    const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += fn(iters);
    const double t = now() - t0;
    if (!std::isfinite(sink)) std::fprintf(stderr, "gemm_bench: peak loop overflowed\n");
    best = std::max(best, flop_per_iter * static_cast<double>(iters) * threads / t / 1e9);
  }
  return best;
}

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  const char* what;
  int m, n, k;
  bool ta, tb;  // A stored k x m (transposed), B stored n x k (transposed)
};

// Repeated timings of one library on one shape.
constexpr int kRepeats = 3;

struct Result {
  std::vector<double> runs;  // GFLOP/s of each timing, sorted once all are in
  double gflops = 0;         // their median
  double max_rel_err = 0;
  int reps = 0;  // calls per timing, found by the first
};

// Row-major C (m x n) = op(A) op(B).
struct Problem {
  Shape s;
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
  Problem(const Shape& shape, std::mt19937& rng) : s(shape) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(static_cast<size_t>(s.m) * s.k);
    b.resize(static_cast<size_t>(s.k) * s.n);
    c.resize(static_cast<size_t>(s.m) * s.n);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    for (float x : a) a16.push_back(to_bf16(x));
    for (float x : b) b16.push_back(to_bf16(x));
  }
  float at_a(int i, int p, bool bf16) const {
    const size_t idx = s.ta ? static_cast<size_t>(p) * s.m + i : static_cast<size_t>(i) * s.k + p;
    return bf16 ? from_bf16(a16[idx]) : a[idx];
  }
  float at_b(int p, int j, bool bf16) const {
    const size_t idx = s.tb ? static_cast<size_t>(j) * s.k + p : static_cast<size_t>(p) * s.n + j;
    return bf16 ? from_bf16(b16[idx]) : b[idx];
  }
  // Largest |C - reference| / (sum |terms|) over 256 sampled entries.
  double check(bool bf16) const {
    std::mt19937 pick(7);
    double worst = 0;
    for (int t = 0; t < 256; ++t) {
      const int i = static_cast<int>(pick() % s.m), j = static_cast<int>(pick() % s.n);
      double ref = 0, scale = 0;
      for (int p = 0; p < s.k; ++p) {
        const double term = static_cast<double>(at_a(i, p, bf16)) * at_b(p, j, bf16);
        ref += term;
        scale += std::fabs(term);
      }
      worst = std::max(worst, std::fabs(c[static_cast<size_t>(i) * s.n + j] - ref) / scale);
    }
    return worst;
  }
};

// GFLOP/s of `call` over one timed loop of half a second or more. `reps` carries the loop's
// length from one timing of a shape and library to the next: the first finds it by doubling
// from a single call (after a warm-up call), the later ones run it at once.
double time_it(const std::function<void()>& call, double flop, int& reps) {
  if (reps == 0) {
    call();
    reps = 1;
  }
  double t = 0;
  while (true) {
    const double t0 = now();
    for (int r = 0; r < reps; ++r) call();
    t = now() - t0;
    if (t > 0.5 || reps > 100000) break;
    reps *= 2;
  }
  return flop * reps / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads();
  bool json = false, peak_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--peak-only") {
      peak_only = true;
    } else {
      std::fprintf(stderr,
                   "gemm_bench: unknown argument '%s'; usage: gemm_bench [--threads T] [--json] "
                   "[--peak-only]\n",
                   argv[i]);
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "gemm_bench: --threads must be positive\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const bool has_avx512 = __builtin_cpu_supports("avx512f");
  const bool has_bf16 = __builtin_cpu_supports("avx512bf16");
  const double peak_avx2 = peak(fma_avx2, 12 * 8 * 2.0, threads);
  const double peak_avx512 = has_avx512 ? peak(fma_avx512, 12 * 16 * 2.0, threads) : 0;
  const double peak_bf16 = has_bf16 ? peak(dot_bf16, 12 * 32 * 2.0, threads) : 0;
  const double peak_fp32 = std::max(peak_avx2, peak_avx512);
  if (peak_only) {
    std::printf("{\"threads\": %d, \"peak_gflops\": {\"fp32\": %.1f, \"bf16\": %.1f}}\n", threads,
                peak_fp32, peak_bf16);
    return 0;
  }

  // The engine's GEMM runs at the precision a run would set (--precision bf16).
  if (has_bf16) cann::kernels::set_gemm_precision(cann::kernels::GemmPrecision::kBf16);
  // The models' GEMMs: the benchmark GPT (hidden 384, feed-forward 1536, 8 x 256 tokens),
  // gpt_tiny (hidden 192, feed-forward 768, 16 x 128 tokens), and one large square.
  const std::vector<Shape> shapes = {
      {"square", 2048, 2048, 2048, false, true},
      {"bench qkv fwd", 2048, 1152, 384, false, true},
      {"bench fc1 fwd", 2048, 1536, 384, false, true},
      {"bench fc2 fwd", 2048, 384, 1536, false, true},
      {"bench fc2 dx", 2048, 1536, 384, false, false},
      {"bench fc2 dw", 384, 1536, 2048, true, false},
      {"bench proj fwd", 2048, 384, 384, false, true},
      {"tiny fc1 fwd", 2048, 768, 192, false, true},
      {"tiny fc1 dw", 768, 192, 2048, true, false},
  };
  std::mt19937 rng(1);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  bool failed = false;
  struct Row {
    Shape s;
    Result openblas, onednn, bf16, engine_bf16;
  };
  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    Problem p(s, rng);
    const double flop = 2.0 * s.m * s.n * s.k;
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    Row row{s, {}, {}, {}, {}};
    // Each library once, checked; then kRepeats timings of each, taking turns.
    std::vector<std::pair<Result*, std::function<void()>>> libs = {
        {&row.openblas,
         [&] {
           cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                       s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, p.a.data(), lda,
                       p.b.data(), ldb, 0.0f, p.c.data(), s.n);
         }},
        {&row.onednn, [&] {
           dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, p.a.data(), lda,
                      p.b.data(), ldb, 0.0f, p.c.data(), s.n);
         }}};
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a_md({s.m, s.k}, dt::bf16, s.ta ? tag::ba : tag::ab);
    const dnnl::memory::desc b_md({s.k, s.n}, dt::bf16, s.tb ? tag::ba : tag::ab);
    const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, tag::ab);
    std::optional<dnnl::matmul> mm;
    dnnl::memory A, B, C;
    if (has_bf16) {
      mm.emplace(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng));
      A = dnnl::memory(a_md, eng, p.a16.data());
      B = dnnl::memory(b_md, eng, p.b16.data());
      C = dnnl::memory(c_md, eng, p.c.data());
      libs.push_back(
          {&row.bf16, [&] {
             mm->execute(stream, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
             stream.wait();
           }});
      libs.push_back({&row.engine_bf16, [&] {
                        cann::kernels::gemm(s.ta, s.tb, s.m, s.n, s.k, p.a.data(), lda, p.b.data(),
                                            ldb, 0.0f, p.c.data(), s.n);
                      }});
    }
    for (size_t l = 0; l < libs.size(); ++l) {
      libs[l].second();
      libs[l].first->max_rel_err = p.check(l >= 2);
    }
    for (int r = 0; r < kRepeats; ++r)
      for (auto& [result, call] : libs) result->runs.push_back(time_it(call, flop, result->reps));
    for (auto& lib : libs) {
      std::vector<double>& v = lib.first->runs;
      std::sort(v.begin(), v.end());
      lib.first->gflops = v[v.size() / 2];
    }
    // fp32 sums of k terms in any order: within k * 2^-24 of the scale; bf16 inputs are
    // checked against their own rounded values, so the same bound holds.
    const double tol = s.k * 6e-8 + 1e-6;
    for (const Result* r : {&row.openblas, &row.onednn, &row.bf16, &row.engine_bf16})
      if (r->max_rel_err > tol) {
        std::fprintf(stderr, "gemm_bench: %s %dx%dx%d: error %.2e over %.2e\n", s.what, s.m, s.n,
                     s.k, r->max_rel_err, tol);
        failed = true;
      }
    rows.push_back(row);
  }
  const Row& big = rows.front();
  const double fp32_best = std::max(big.openblas.gflops, big.onednn.gflops) / peak_fp32;
  const double bf16_best =
      has_bf16 ? std::max(big.bf16.gflops, big.engine_bf16.gflops) / peak_bf16 : 0;
  if (json) {
    std::printf(
        "{\"threads\": %d, \"peak_gflops\": {\"avx2_fp32\": %.1f, \"avx512_fp32\": %.1f, "
        "\"avx512_bf16\": %.1f}, \"shapes\": [",
        threads, peak_avx2, peak_avx512, peak_bf16);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "%s{\"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"openblas_fp32\": %.1f, "
          "\"onednn_fp32\": %.1f, \"onednn_bf16\": %.1f, \"cann_train_bf16\": %.1f}",
          i ? ", " : "", r.s.what, r.s.m, r.s.n, r.s.k, r.openblas.gflops, r.onednn.gflops,
          r.bf16.gflops, r.engine_bf16.gflops);
    }
    std::printf("]}\n");
  } else {
    std::printf(
        "# peak, %d thread%s (GFLOP/s): fp32 AVX2 %.1f, fp32 AVX-512 %.1f, bf16 AVX-512 "
        "%.1f\n",
        threads, threads == 1 ? "" : "s", peak_avx2, peak_avx512, peak_bf16);
    std::printf("# OpenBLAS %s (kernels for %s); oneDNN %d.%d.%d (ISA code 0x%x)\n",
                openblas_get_config(), openblas_get_corename(), dnnl_version()->major,
                dnnl_version()->minor, dnnl_version()->patch,
                static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
    std::printf(
        "# GFLOP/s, median of %d timings (its share of the precision's peak) and their "
        "range\n",
        kRepeats);
    std::printf("# %-15s %14s %29s %29s %29s %29s\n", "shape", "m x n x k", "OpenBLAS fp32",
                "oneDNN fp32", "oneDNN bf16", "cann-train bf16");
    for (const Row& r : rows) {
      char dims[32];
      std::snprintf(dims, sizeof(dims), "%dx%dx%d", r.s.m, r.s.n, r.s.k);
      auto cell = [](const Result& x, double peak) {
        char buf[64];
        if (x.runs.empty()) return std::string("-");
        std::snprintf(buf, sizeof(buf), "%6.1f (%3.0f%%) %6.1f..%-6.1f", x.gflops,
                      peak > 0 ? 100 * x.gflops / peak : 0.0, x.runs.front(), x.runs.back());
        return std::string(buf);
      };
      std::printf("  %-15s %14s %29s %29s %29s %29s\n", r.s.what, dims,
                  cell(r.openblas, peak_fp32).c_str(), cell(r.onednn, peak_fp32).c_str(),
                  cell(r.bf16, peak_bf16).c_str(), cell(r.engine_bf16, peak_bf16).c_str());
    }
    std::printf("target large GEMM at 80%% of its precision's peak: fp32 %.0f%% %s",
                100 * fp32_best, fp32_best >= 0.8 ? "PASS" : "FAIL");
    if (has_bf16)
      // The verdict last on the line, where bench/all looks for it.
      std::printf(
          ", bf16 %.0f%% (oneDNN on bf16 operands %.0f%%, cann-train's GEMM from fp32 operands, "
          "rounding included, %.0f%%) %s",
          100 * bf16_best, 100 * big.bf16.gflops / peak_bf16,
          100 * big.engine_bf16.gflops / peak_bf16, bf16_best >= 0.8 ? "PASS" : "FAIL");
    std::printf("\n");
  }
  if (failed) return 1;
  return fp32_best >= 0.8 && (!has_bf16 || bf16_best >= 0.8) ? 0 : 1;
}
