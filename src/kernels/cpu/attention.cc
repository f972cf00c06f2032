// Fused attention (the method of FlashAttention, Dao et al. 2022, on CPU): per (batch, head),
// queries in blocks of kRowBlock rows meet the keys in blocks of kKeyBlock, the scores of one
// block pair live in a per-thread scratch, and a running row maximum and sum (the online
// softmax) rescale the output rows as blocks arrive. Nothing of size T x T is kept: forward
// saves the log-sum-exp of each query's scores, and backward recomputes each block's
// probabilities from it. Memory per layer is linear in the sequence length.
//
// Causal attention computes only what the mask keeps: row block [i0,i1) meets keys
// [0, pos(i1-1)] only, and only the entries past a row's own position inside its last key block
// are masked. Heads run in parallel across threads; each strided sgemm inside runs on its
// thread alone (oneDNN's sgemm does inside a parallel region). oneDNN rather than OpenBLAS:
// with this build's OpenBLAS held to its AVX2 kernels the block GEMMs took 17% of a bf16 step
// of the benchmark GPT; on oneDNN's AVX-512 ones the step went from about 353 to 330 ms.
//
// One implementation serves both entry points: Operands says where the queries, keys and values
// start and their row strides (one fused qkv buffer, or the rank's queries beside a gathered
// key/value buffer under context parallelism) and each query's position (the key index its
// causal mask ends at; the row index itself when there is no position table).
#include "kernels/cpu/attention.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {

constexpr int kRowBlock = 64;
constexpr int kKeyBlock = 128;

// Row-major C = alpha op(A) op(B) + beta C on one thread (the caller's: inside a parallel
// region oneDNN's sgemm does not start threads of its own).
void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

struct Operands {
  int B, Tq, Tk, NH, KVH, HS;
  bool causal;
  int VS;                    // value head width
  float scale;               // of the scores
  const int* q_pos;          // null: query i is at position i
  int q_stride, kv_stride;   // floats between consecutive rows
  size_t q_batch, kv_batch;  // floats between consecutive sequences
  // Head 0's columns in row 0 of sequence 0 (query, key, value); for backward the same places
  // in the gradient buffers.
  size_t k_col, v_col;
  int pos(int i) const { return q_pos == nullptr ? i : q_pos[i]; }
  int C() const { return NH * VS; }
  // Keys row i sees: [0, keys(i)).
  int keys(int i) const { return causal ? pos(i) + 1 : Tk; }
};

// 1/sqrt(HS) unless the shape gives its own.
float score_scale(float scale, int HS) {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(HS));
}

Operands fused(const AttentionShape& s) {
  const int QKV = s.QKV();
  const size_t batch = static_cast<size_t>(s.T) * QKV;
  return {s.B,
          s.T,
          s.T,
          s.NH,
          s.KVH,
          s.HS,
          s.causal,
          s.vs(),
          score_scale(s.scale, s.HS),
          nullptr,
          QKV,
          QKV,
          batch,
          batch,
          static_cast<size_t>(s.NH * s.HS),
          static_cast<size_t>((s.NH + s.KVH) * s.HS)};
}

Operands split(const ContextAttentionShape& s, int q_stride) {
  const int KV = s.KV();
  return {s.B,
          s.Tq,
          s.Tk,
          s.NH,
          s.KVH,
          s.HS,
          s.causal,
          s.vs(),
          score_scale(s.scale, s.HS),
          s.q_pos,
          q_stride,
          KV,
          static_cast<size_t>(s.Tq) * q_stride,
          static_cast<size_t>(s.Tk) * KV,
          0,
          static_cast<size_t>(s.KVH * s.HS)};
}

// Per (batch, query head): where its queries, keys and values start, and its Tq entries of
// the log-sum-exp buffer (B,NH,Tq).
struct Head {
  const float *q, *k, *v;
  size_t lse_at;
};

Head head(const float* q_buf, const float* kv_buf, const Operands& o, int b, int h) {
  const int kh = h / (o.NH / o.KVH);
  return {q_buf + b * o.q_batch + h * o.HS, kv_buf + b * o.kv_batch + o.k_col + kh * o.HS,
          kv_buf + b * o.kv_batch + o.v_col + kh * o.VS,
          (static_cast<size_t>(b) * o.NH + h) * o.Tq};
}

// s[0:rows, 0:cols] = scale * q[i0:i1] k[j0:j1]^T, the scores of one block pair (ld kKeyBlock).
void block_scores(float* s, const Head& hd, const Operands& o, int i0, int rows, int j0, int cols) {
  sgemm(false, true, rows, cols, o.HS, o.scale, hd.q + static_cast<size_t>(i0) * o.q_stride,
        o.q_stride, hd.k + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride, 0.0f, s, kKeyBlock);
}

// Columns of key block [j0, j0+cols) that query row i sees (0 when the block is past it).
int visible(const Operands& o, int i, int j0, int cols) {
  return std::clamp(o.keys(i) - j0, 0, cols);
}

// Forward of one (batch, head): out rows (stride C) and the log-sum-exp of each query's
// scores. With out null, only the log-sum-exp (selective recomputation), by the same
// arithmetic, so it comes out bitwise equal.
void forward_head(float* out_h, float* lse, const Head& hd, const Operands& o, float* s, float* m,
                  float* l) {
  const int C = o.C(), VS = o.VS;
  for (int i0 = 0; i0 < o.Tq; i0 += kRowBlock) {
    const int rows = std::min(o.Tq, i0 + kRowBlock) - i0;
    const int kend = o.keys(i0 + rows - 1);  // the last row sees the most keys
    std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
    std::fill(l, l + rows, 0.0f);
    if (out_h != nullptr)
      for (int r = 0; r < rows; ++r)
        std::memset(out_h + static_cast<size_t>(i0 + r) * C, 0, sizeof(float) * VS);
    for (int j0 = 0; j0 < kend; j0 += kKeyBlock) {
      const int cols = std::min(kend, j0 + kKeyBlock) - j0;
      block_scores(s, hd, o, i0, rows, j0, cols);
      for (int r = 0; r < rows; ++r) {
        float* row = s + static_cast<size_t>(r) * kKeyBlock;
        const int len = visible(o, i0 + r, j0, cols);
        float mx = m[r];
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < len; ++j) mx = std::max(mx, row[j]);
        // The first block holds key 0, which every query sees: mx is finite from then on.
        const float alpha = len == 0 || m[r] == mx ? 1.0f : fast_exp(m[r] - mx);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < len; ++j) {
          const float e = fast_exp(row[j] - mx);
          row[j] = e;
          sum += e;
        }
        if (len < cols) std::memset(row + len, 0, sizeof(float) * (cols - len));
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        if (out_h != nullptr && alpha != 1.0f) {
          float* o_row = out_h + static_cast<size_t>(i0 + r) * C;
#pragma omp simd
          for (int d = 0; d < VS; ++d) o_row[d] *= alpha;
        }
      }
      if (out_h == nullptr) continue;
      // out[i0:i1] += p v[j0:j1]
      sgemm(false, false, rows, VS, cols, 1.0f, s, kKeyBlock,
            hd.v + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride, 1.0f,
            out_h + static_cast<size_t>(i0) * C, C);
    }
    for (int r = 0; r < rows; ++r) {
      lse[i0 + r] = m[r] + std::log(l[r]);
      if (out_h == nullptr) continue;
      float* o_row = out_h + static_cast<size_t>(i0 + r) * C;
      const float inv = 1.0f / l[r];
#pragma omp simd
      for (int d = 0; d < VS; ++d) o_row[d] *= inv;
    }
  }
}

// q and kv: the query buffer and the key/value buffer (the same fused buffer for attention_*).
void forward(float* out, float* lse, const float* q_buf, const float* kv_buf, const Operands& o) {
#pragma omp parallel
  {
    std::vector<float> s(static_cast<size_t>(kRowBlock) * kKeyBlock), m(kRowBlock), l(kRowBlock);
#pragma omp for schedule(static)
    for (int bh = 0; bh < o.B * o.NH; ++bh) {
      const int b = bh / o.NH, h = bh % o.NH;
      float* out_h =
          out == nullptr ? nullptr : out + static_cast<size_t>(b) * o.Tq * o.C() + h * o.VS;
      const Head hd = head(q_buf, kv_buf, o, b, h);
      forward_head(out_h, lse + hd.lse_at, hd, o, s.data(), m.data(), l.data());
    }
  }
}

// dq_buf and dkv_buf have the layouts of q_buf and kv_buf (the same buffer when fused).
void backward(float* dq_buf, float* dkv_buf, const float* dout, const float* q_buf,
              const float* kv_buf, const float* out, const float* lse, const Operands& o) {
  const int Tq = o.Tq, HS = o.HS, VS = o.VS, C = o.C();
  const int group = o.NH / o.KVH;
  // One task per (batch, kv head): the query heads sharing a kv head add into the same dk, dv.
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(kRowBlock) * kKeyBlock),
        dp(static_cast<size_t>(kRowBlock) * kKeyBlock), delta(kRowBlock);
#pragma omp for schedule(static)
    for (int bk = 0; bk < o.B * o.KVH; ++bk) {
      const int b = bk / o.KVH, kh = bk % o.KVH;
      const size_t k_at = b * o.kv_batch + o.k_col + kh * HS;
      const size_t v_at = b * o.kv_batch + o.v_col + kh * VS;
      float* dk = dkv_buf + k_at;
      float* dv = dkv_buf + v_at;
      for (int t = 0; t < o.Tk; ++t) {
        std::memset(dk + static_cast<size_t>(t) * o.kv_stride, 0, sizeof(float) * HS);
        std::memset(dv + static_cast<size_t>(t) * o.kv_stride, 0, sizeof(float) * VS);
      }
      for (int h = kh * group; h < (kh + 1) * group; ++h) {
        const Head hd = head(q_buf, kv_buf, o, b, h);
        const float* lse_h = lse + hd.lse_at;
        float* dq = dq_buf + b * o.q_batch + h * HS;
        const float* dout_h = dout + static_cast<size_t>(b) * Tq * C + h * VS;
        const float* out_h = out + static_cast<size_t>(b) * Tq * C + h * VS;
        for (int i0 = 0; i0 < Tq; i0 += kRowBlock) {
          const int rows = std::min(Tq, i0 + kRowBlock) - i0;
          const int kend = o.keys(i0 + rows - 1);
          const float* do_blk = dout_h + static_cast<size_t>(i0) * C;
          const float* q_blk = hd.q + static_cast<size_t>(i0) * o.q_stride;
          float* dq_blk = dq + static_cast<size_t>(i0) * o.q_stride;
          // delta_i = sum_d dout_id out_id: the softmax backward's row term, sum_j p_ij dp_ij.
          for (int r = 0; r < rows; ++r) {
            const float* a = do_blk + static_cast<size_t>(r) * C;
            const float* y = out_h + static_cast<size_t>(i0 + r) * C;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < VS; ++d) dot += a[d] * y[d];
            delta[r] = dot;
            std::memset(dq_blk + static_cast<size_t>(r) * o.q_stride, 0, sizeof(float) * HS);
          }
          for (int j0 = 0; j0 < kend; j0 += kKeyBlock) {
            const int cols = std::min(kend, j0 + kKeyBlock) - j0;
            block_scores(p.data(), hd, o, i0, rows, j0, cols);
            // dp = dout v^T
            sgemm(false, true, rows, cols, VS, 1.0f, do_blk, C,
                  hd.v + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride, 0.0f, dp.data(),
                  kKeyBlock);
            // p = exp(s - lse); ds = p * (dp - delta), times the score scale (into dp).
            for (int r = 0; r < rows; ++r) {
              float* pr = p.data() + static_cast<size_t>(r) * kKeyBlock;
              float* dr = dp.data() + static_cast<size_t>(r) * kKeyBlock;
              const int len = visible(o, i0 + r, j0, cols);
              const float lse_r = lse_h[i0 + r], dl = delta[r], scale = o.scale;
#pragma omp simd
              for (int j = 0; j < len; ++j) {
                const float e = fast_exp(pr[j] - lse_r);
                pr[j] = e;
                dr[j] = e * (dr[j] - dl) * scale;
              }
              for (int j = len; j < cols; ++j) pr[j] = dr[j] = 0.0f;
            }
            // dv[j0:j1] += p^T dout
            sgemm(true, false, cols, VS, rows, 1.0f, p.data(), kKeyBlock, do_blk, C, 1.0f,
                  dv + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride);
            // dq[i0:i1] += ds k[j0:j1]
            sgemm(false, false, rows, HS, cols, 1.0f, dp.data(), kKeyBlock,
                  hd.k + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride, 1.0f, dq_blk,
                  o.q_stride);
            // dk[j0:j1] += ds^T q[i0:i1]
            sgemm(true, false, cols, HS, rows, 1.0f, dp.data(), kKeyBlock, q_blk, o.q_stride, 1.0f,
                  dk + static_cast<size_t>(j0) * o.kv_stride, o.kv_stride);
          }
        }
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttentionShape& s) {
  forward(out, lse, qkv, qkv, fused(s));
}

void attention_lse_forward(float* lse, const float* qkv, const AttentionShape& s) {
  forward(nullptr, lse, qkv, qkv, fused(s));
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const AttentionShape& s) {
  backward(dqkv, dqkv, dout, qkv, qkv, out, lse, fused(s));
}

void context_attention_forward(float* out, float* lse, const float* q, int q_stride,
                               const float* kv, const ContextAttentionShape& s) {
  forward(out, lse, q, kv, split(s, q_stride));
}

void context_attention_lse_forward(float* lse, const float* q, int q_stride, const float* kv,
                                   const ContextAttentionShape& s) {
  forward(nullptr, lse, q, kv, split(s, q_stride));
}

void context_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                                int q_stride, const float* kv, const float* out, const float* lse,
                                const ContextAttentionShape& s) {
  backward(dq, dkv, dout, q, kv, out, lse, split(s, q_stride));
}

}  // namespace cann::kernels
