// Attention per (batch, head) through strided sgemm calls straight on the operand buffers (no
// gathering of heads), with the softmax fused between the two GEMMs.
//
// Causal attention computes only what the mask keeps: rows are taken in blocks of kRowBlock,
// and block [i0,i1) multiplies against keys [0, pos(i1-1)] only. At T = 256 that is 4 blocks and
// (1+2+3+4)/16 = 62.5% of the full QK^T and AV work. Heads run in parallel across threads and
// each sgemm inside runs single-threaded (OpenBLAS on OpenMP does that inside a parallel region).
//
// One implementation serves both entry points: Operands says where the queries, keys and values
// start and their row strides (one fused qkv buffer, or the rank's queries beside a gathered
// key/value buffer under context parallelism) and each query's position (the key index its
// causal mask ends at; the row index itself when there is no position table).
#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {

constexpr int kRowBlock = 64;

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

// Softmax of rows [i0,i1) of a (Tq,Tk) score block in place; row i keeps columns [0, len(i)).
void softmax_rows(float* a, const Operands& o, int i0, int i1) {
  const int Tk = o.Tk;
  for (int i = i0; i < i1; ++i) {
    float* row = a + static_cast<size_t>(i) * Tk;
    const int len = o.causal ? o.pos(i) + 1 : Tk;
    float mx = row[0];
    for (int j = 1; j < len; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < len; ++j) {
      const float e = fast_exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < len; ++j) row[j] *= inv;
    if (len < Tk) std::memset(row + len, 0, sizeof(float) * (Tk - len));
  }
}

// q and kv: the query buffer and the key/value buffer (the same fused buffer for attention_*).
void forward(float* out, float* att, const float* q_buf, const float* kv_buf, const Operands& o) {
  const int Tq = o.Tq, Tk = o.Tk, HS = o.HS, VS = o.VS, C = o.C();
  const int group = o.NH / o.KVH;
  const float scale = o.scale;
  const int block = o.causal ? kRowBlock : Tq;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < o.B * o.NH; ++bh) {
    const int b = bh / o.NH, h = bh % o.NH, kh = h / group;
    const float* q = q_buf + b * o.q_batch + h * HS;
    const float* k = kv_buf + b * o.kv_batch + o.k_col + kh * HS;
    const float* v = kv_buf + b * o.kv_batch + o.v_col + kh * VS;
    float* a = att + static_cast<size_t>(bh) * Tq * Tk;
    float* out_h = out == nullptr ? nullptr : out + static_cast<size_t>(b) * Tq * C + h * VS;
    for (int i0 = 0; i0 < Tq; i0 += block) {
      const int i1 = std::min(Tq, i0 + block);
      const int keys = o.causal ? o.pos(i1 - 1) + 1 : Tk;
      // a[i0:i1, 0:keys] = scale * q[i0:i1] k[0:keys]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, keys, HS, scale,
                  q + static_cast<size_t>(i0) * o.q_stride, o.q_stride, k, o.kv_stride, 0.0f,
                  a + static_cast<size_t>(i0) * Tk, Tk);
      softmax_rows(a, o, i0, i1);
      if (out_h == nullptr) continue;  // probabilities only
      // out[i0:i1] = a[i0:i1, 0:keys] v[0:keys]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, VS, keys, 1.0f,
                  a + static_cast<size_t>(i0) * Tk, Tk, v, o.kv_stride, 0.0f,
                  out_h + static_cast<size_t>(i0) * C, C);
    }
  }
}

// dq_buf and dkv_buf have the layouts of q_buf and kv_buf (the same buffer when fused).
void backward(float* dq_buf, float* dkv_buf, const float* dout, const float* q_buf,
              const float* kv_buf, const float* att, const Operands& o) {
  const int Tq = o.Tq, Tk = o.Tk, HS = o.HS, VS = o.VS, C = o.C();
  const int group = o.NH / o.KVH;
  const float scale = o.scale;
  const int block = o.causal ? kRowBlock : Tq;
  // One task per (batch, kv head): the query heads sharing a kv head add into the same dk, dv.
#pragma omp parallel
  {
    std::vector<float> datt(static_cast<size_t>(Tq) * Tk);
#pragma omp for schedule(static)
    for (int bk = 0; bk < o.B * o.KVH; ++bk) {
      const int b = bk / o.KVH, kh = bk % o.KVH;
      const size_t k_at = b * o.kv_batch + o.k_col + kh * HS;
      const size_t v_at = b * o.kv_batch + o.v_col + kh * VS;
      const float* k = kv_buf + k_at;
      const float* v = kv_buf + v_at;
      float* dk = dkv_buf + k_at;
      float* dv = dkv_buf + v_at;
      for (int t = 0; t < Tk; ++t) {
        std::memset(dk + static_cast<size_t>(t) * o.kv_stride, 0, sizeof(float) * HS);
        std::memset(dv + static_cast<size_t>(t) * o.kv_stride, 0, sizeof(float) * VS);
      }
      for (int h = kh * group; h < (kh + 1) * group; ++h) {
        const float* q = q_buf + b * o.q_batch + h * HS;
        float* dq = dq_buf + b * o.q_batch + h * HS;
        const float* a = att + (static_cast<size_t>(b) * o.NH + h) * Tq * Tk;
        const float* dout_h = dout + static_cast<size_t>(b) * Tq * C + h * VS;
        for (int i0 = 0; i0 < Tq; i0 += block) {
          const int i1 = std::min(Tq, i0 + block);
          const int rows = i1 - i0;
          const int keys = o.causal ? o.pos(i1 - 1) + 1 : Tk;
          const float* a_blk = a + static_cast<size_t>(i0) * Tk;
          float* da_blk = datt.data() + static_cast<size_t>(i0) * Tk;
          const float* do_blk = dout_h + static_cast<size_t>(i0) * C;
          // datt = dout v^T
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, VS, 1.0f, do_blk, C, v,
                      o.kv_stride, 0.0f, da_blk, Tk);
          // dv[0:keys] += a^T dout
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, VS, rows, 1.0f, a_blk, Tk,
                      do_blk, C, 1.0f, dv, o.kv_stride);
          // softmax backward: ds = a * (datt - sum_j a*datt), times the score scale
          for (int i = 0; i < rows; ++i) {
            const float* ar = a_blk + static_cast<size_t>(i) * Tk;
            float* dr = da_blk + static_cast<size_t>(i) * Tk;
            const int len = o.causal ? o.pos(i0 + i) + 1 : Tk;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < len; ++j) dot += ar[j] * dr[j];
#pragma omp simd
            for (int j = 0; j < len; ++j) dr[j] = ar[j] * (dr[j] - dot) * scale;
            for (int j = len; j < keys; ++j) dr[j] = 0.0f;
          }
          // dq[i0:i1] = ds k[0:keys]   (overwrite: each query head has its own dq)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, keys, 1.0f, da_blk, Tk,
                      k, o.kv_stride, 0.0f, dq + static_cast<size_t>(i0) * o.q_stride, o.q_stride);
          // dk[0:keys] += ds^T q[i0:i1]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, HS, rows, 1.0f, da_blk, Tk,
                      q + static_cast<size_t>(i0) * o.q_stride, o.q_stride, 1.0f, dk, o.kv_stride);
        }
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, const AttentionShape& s) {
  forward(out, att, qkv, qkv, fused(s));
}

// The probabilities alone: attention_forward itself with the AV product skipped, which is what
// keeps them bitwise equal to the ones a forward saved.
void attention_probs_forward(float* att, const float* qkv, const AttentionShape& s) {
  forward(nullptr, att, qkv, qkv, fused(s));
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s) {
  backward(dqkv, dqkv, dout, qkv, qkv, att, fused(s));
}

void context_attention_forward(float* out, float* att, const float* q, int q_stride,
                               const float* kv, const ContextAttentionShape& s) {
  forward(out, att, q, kv, split(s, q_stride));
}

void context_attention_probs_forward(float* att, const float* q, int q_stride, const float* kv,
                                     const ContextAttentionShape& s) {
  forward(nullptr, att, q, kv, split(s, q_stride));
}

void context_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                                int q_stride, const float* kv, const float* att,
                                const ContextAttentionShape& s) {
  backward(dq, dkv, dout, q, kv, att, split(s, q_stride));
}

}  // namespace cann::kernels
