// Multi-head scaled dot-product attention, fused (blockwise with an online softmax, memory
// linear in the sequence), causal (GPT) or bidirectional (BERT), with grouped-query attention
// when kv_heads < heads. Two entry points over one implementation: the whole sequence from one
// fused qkv buffer, and the context-parallel form, where a rank's queries are some positions of the sequence and the keys and
// values are all of them (gathered from the other ranks: model/context_parallel.cc).
#pragma once

namespace cann::kernels {

// qkv is (B,T,QKV) with QKV = (NH + KVH)*HS + KVH*VS, each token laid out [q heads | k heads |
// v heads]; query head h reads kv head h / (NH/KVH). out is (B,T,C) with C = NH*VS. lse is
// (B,NH,T): the log-sum-exp of each query's scores, which is all backward needs of the softmax
// (it recomputes the probabilities block by block; nothing T x T is kept). Query and key heads
// are HS wide, value heads VS (0: HS; multi-head latent attention's v_head_dim differs from its
// qk_nope + qk_rope). The scores are scaled by `scale` (0: 1/sqrt(HS); DeepSeek multiplies that
// by a yarn factor).
struct AttentionShape {
  int B, T, NH, KVH, HS;
  bool causal;
  int VS = 0;
  float scale = 0.0f;
  int vs() const { return VS > 0 ? VS : HS; }
  int C() const { return NH * vs(); }
  int QKV() const { return (NH + KVH) * HS + KVH * vs(); }
};

void attention_forward(float* out, float* lse, const float* qkv, const AttentionShape& s);
// lse alone, for selective recomputation: the same GEMMs and online softmax as
// attention_forward, so it comes out bitwise equal to the one it saved.
void attention_lse_forward(float* lse, const float* qkv, const AttentionShape& s);
// dqkv (B,T,QKV) is overwritten; dout is (B,T,C); out and lse are attention_forward's.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, const AttentionShape& s);

// Context parallelism: Tq queries per sequence, at positions q_pos[0..Tq) (strictly ascending)
// of a sequence of Tk; the causal mask is by position, so query i sees keys [0, q_pos[i]].
// Queries are read from rows of q_stride floats, query head h at column h*HS (q may point into
// a fused qkv buffer); kv is (B,Tk,KV) with KV = KVH*(HS + VS), each position [k heads | v heads].
// out is (B,Tq,C); lse is (B,NH,Tq). With Tq = Tk and q_pos[i] = i this is attention_forward.
// VS and scale as in AttentionShape.
struct ContextAttentionShape {
  int B, Tq, Tk, NH, KVH, HS;
  bool causal;
  const int* q_pos;
  int VS = 0;
  float scale = 0.0f;
  int vs() const { return VS > 0 ? VS : HS; }
  int C() const { return NH * vs(); }
  int KV() const { return KVH * (HS + vs()); }
};

void context_attention_forward(float* out, float* lse, const float* q, int q_stride,
                               const float* kv, const ContextAttentionShape& s);
// lse alone (selective recomputation), bitwise equal to context_attention_forward's.
void context_attention_lse_forward(float* lse, const float* q, int q_stride, const float* kv,
                                   const ContextAttentionShape& s);
// dq: the query columns of (B,Tq,q_stride) rows are overwritten, the other columns untouched;
// dkv (B,Tk,KV) is overwritten with the gradient of every key and value from these queries
// only (the other ranks' queries add theirs: a reduce-scatter sums them).
void context_attention_backward(float* dq, float* dkv, const float* dout, const float* q,
                                int q_stride, const float* kv, const float* out, const float* lse,
                                const ContextAttentionShape& s);

}  // namespace cann::kernels
