// Context parallelism in Model (Korthikanti et al.'s and Megatron-LM's cp; the all-gather form
// Llama 3 trains with): the sequence of every micro-batch is split over the cp ranks, and only
// attention, which mixes positions, talks to the other ranks.
//
// Which rows a rank holds. A sequence of T is cut into 2*cp chunks of Tc = T/(2*cp); rank r
// holds chunks r and 2*cp-1-r, in that order, so its T/cp rows have ascending positions and
// every rank gets the same causal attention work (an early chunk with few keys beside a late
// one with many). Example, T = 8 and cp = 2 (Tc = 2): rank 0 holds positions 0 1 6 7, rank 1
// holds 2 3 4 5. BERT's bidirectional attention does not need the balance; it uses the same
// split so that one code path serves both.
//
// Per layer, forward: pack this rank's keys and values out of its qkv rows, all-gather them over
// the cp group (cp blocks of B x T/cp rows, in rank order), and place them by position into the
// layer's kv buffer (B,T,2*kvh*hs), which backward and selective recomputation read again.
// Each rank's queries attend to every key with the causal mask taken by global position
// (kernels' context_attention_*). Backward computes the gradient of every key and value from
// this rank's queries, puts it back in rank-block order and reduce-scatters (sums) it, so each
// rank receives the whole gradient of its own keys and values. Cost per layer over cp ranks of
// kv = B*T/cp*2*kvh*hs floats each: all-gather (cp-1) * 4kv bytes received in forward,
// reduce-scatter the same in backward (plan/layer_cost.cc models exactly these two).
//
// Embeddings take global positions; the loss is the mean over the scored positions of all
// ranks (sum and count all-reduced), so its gradient, and the parameter gradients summed over
// the cp ranks, are the single process's.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/embedding.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

namespace {

// Position of the first row of the k-th chunk (0 or 1) rank r holds, chunks of Tc.
int chunk_start(int k, int r, int cp, int Tc) {
  return (k == 0 ? r : 2 * cp - 1 - r) * Tc;
}

}  // namespace

const int* Model::cp_positions(int T) {
  if (cp_pos_seq_ != T) {
    const int Tc = T / (2 * cp_.size);
    cp_pos_.resize(static_cast<size_t>(2) * Tc);
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < Tc; ++i) cp_pos_[k * Tc + i] = chunk_start(k, cp_.rank, cp_.size, Tc) + i;
    cp_pos_seq_ = T;
  }
  return cp_pos_.data();
}

void Model::select_rows(int* local, const int* global, int B, int T) const {
  if (cp_.size == 1) {
    std::memcpy(local, global, sizeof(int) * B * T);
    return;
  }
  const int Tc = T / (2 * cp_.size), Tl = 2 * Tc;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 2; ++k)
      std::memcpy(local + static_cast<size_t>(b) * Tl + k * Tc,
                  global + static_cast<size_t>(b) * T + chunk_start(k, cp_.rank, cp_.size, Tc),
                  sizeof(int) * Tc);
}

// One kernel call per (sequence, chunk): a chunk is Tc consecutive positions, so the position
// table is wpe shifted to the chunk's start.
void Model::cp_embedding_forward(int B) {
  const int C = spec_.hidden_size, Tc = seq_ / (2 * cp_.size), Tl = 2 * Tc;
  const bool tp = tp_.size > 1;
  const float* P = params_at_;
  // Under tp each rank looks up its vocabulary slice and one rank adds the positions; the
  // partial sums are reduced (scattered by rows under sp), as Model::forward does.
  float* out = tp && tp_.sequence_parallel ? tp_full_ : encoded_;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 2; ++k) {
      const size_t row = static_cast<size_t>(b) * Tl + k * Tc;
      const float* wpe =
          wpe_ == kAbsent
              ? nullptr
              : P + wpe_ + static_cast<size_t>(chunk_start(k, cp_.rank, cp_.size, Tc)) * C;
      if (!tp)
        embedding_forward(out + row * C, inputs_ + row, P + wte_, wpe, 1, Tc, C);
      else
        embedding_forward_vocab_range(out + row * C, inputs_ + row, P + wte_,
                                      tp_.rank == 0 ? wpe : nullptr, 1, Tc, C, vocab_begin_,
                                      vocab_begin_ + vocab_valid_);
    }
  if (tp) tp_row_parallel_out(encoded_, out, B * Tl);
}

void Model::cp_embedding_backward(const float* dout, int B) {
  const int C = spec_.hidden_size, Tc = seq_ / (2 * cp_.size), Tl = 2 * Tc;
  float* G = grads_.data();
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 2; ++k) {
      const size_t row = static_cast<size_t>(b) * Tl + k * Tc;
      float* dwpe = wpe_ == kAbsent
                        ? nullptr
                        : G + wpe_ + static_cast<size_t>(chunk_start(k, cp_.rank, cp_.size, Tc)) * C;
      if (tp_.size == 1)
        embedding_backward(G + wte_, dwpe, dout + row * C, inputs_ + row, 1, Tc, C);
      else
        embedding_backward_vocab_range(G + wte_, dwpe, dout + row * C, inputs_ + row, 1, Tc, C,
                                       vocab_begin_, vocab_begin_ + vocab_valid_);
    }
}

// kv rows of rank j's block: sequence b, local row i -> position chunk_start(k, j) + i % Tc.
void Model::cp_gather_kv(float* kv, const float* qkv) {
  const int B = B_, T = seq_, P = cp_.size, Tc = T / (2 * P), Tl = 2 * Tc;
  const size_t KV = static_cast<size_t>(qkv_ - q_cols_), block = static_cast<size_t>(B) * Tl * KV;
  float* mine = cp_blocks_ + cp_.rank * block;
  for (size_t row = 0; row < static_cast<size_t>(B) * Tl; ++row)
    std::memcpy(mine + row * KV, qkv + row * qkv_ + q_cols_, sizeof(float) * KV);
  if (tp_status_.ok()) tp_status_ = cp_.comm->allgather(cp_blocks_, mine, block);
  for (int j = 0; j < P; ++j)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < 2; ++k)
        std::memcpy(kv + (static_cast<size_t>(b) * T + chunk_start(k, j, P, Tc)) * KV,
                    cp_blocks_ + j * block + (static_cast<size_t>(b) * Tl + k * Tc) * KV,
                    sizeof(float) * Tc * KV);
}

void Model::cp_scatter_dkv(float* dqkv) {
  const int B = B_, T = seq_, P = cp_.size, Tc = T / (2 * P), Tl = 2 * Tc;
  const size_t KV = static_cast<size_t>(qkv_ - q_cols_), block = static_cast<size_t>(B) * Tl * KV;
  for (int j = 0; j < P; ++j)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < 2; ++k)
        std::memcpy(cp_blocks_ + j * block + (static_cast<size_t>(b) * Tl + k * Tc) * KV,
                    d_kv_ + (static_cast<size_t>(b) * T + chunk_start(k, j, P, Tc)) * KV,
                    sizeof(float) * Tc * KV);
  if (tp_status_.ok()) tp_status_ = cp_.comm->reduce_scatter(cp_local_, cp_blocks_, block);
  for (size_t row = 0; row < static_cast<size_t>(B) * Tl; ++row)
    std::memcpy(dqkv + row * qkv_ + q_cols_, cp_local_ + row * KV, sizeof(float) * KV);
}

AttentionShape Model::whole_attention() const {
  return {B_, T_, nh_, kvh_, qk_hs_, spec_.causal(), v_hs_, attn_scale_};
}

ContextAttentionShape Model::context_attention() {
  return {B_, T_, seq_, nh_, kvh_, qk_hs_, spec_.causal(), cp_positions(seq_), v_hs_, attn_scale_};
}

void Model::attention_fwd(const LayerActs& a) {
  if (cp_.size == 1) {
    attention_forward(a.atty, a.lse, a.qkv, whole_attention());
    return;
  }
  cp_gather_kv(a.kv, a.qkv);
  const ContextAttentionShape s = context_attention();
  context_attention_forward(a.atty, a.lse, a.qkv, qkv_, a.kv, s);
}

void Model::attention_lse(float* lse, const LayerActs& a) {
  if (cp_.size == 1) {
    attention_lse_forward(lse, a.qkv, whole_attention());
    return;
  }
  const ContextAttentionShape s = context_attention();
  context_attention_lse_forward(lse, a.qkv, qkv_, a.kv, s);
}

// Into d_qkv_ from d_atty_, as Model::backward expects.
void Model::attention_bwd(const LayerActs& a) {
  if (cp_.size == 1) {
    attention_backward(d_qkv_, d_atty_, a.qkv, a.atty, a.lse, whole_attention());
    return;
  }
  const ContextAttentionShape s = context_attention();
  context_attention_backward(d_qkv_, d_kv_, d_atty_, a.qkv, qkv_, a.kv, a.atty, a.lse, s);
  cp_scatter_dkv(d_qkv_);
}

// fp32 on the wire: the count is exact below 2^24 positions, the sum to 7 digits, which is
// what the loss is reported to.
void Model::cp_sum_loss(double* sum, int* scored) {
  float wire[2] = {static_cast<float>(*sum), static_cast<float>(*scored)};
  if (tp_status_.ok()) tp_status_ = cp_.comm->allreduce_sum(wire, 2);
  *sum = wire[0];
  *scored = static_cast<int>(wire[1] + 0.5f);
}

}  // namespace cann::model
