// The tensor-parallel pieces of Model's forward and backward: Megatron's conjugate operators
// (all-reduce in forward / identity in backward and the reverse; under sequence parallelism
// all-gather / reduce-scatter pairs), the vocabulary-parallel loss, and norm backward
// with its weight gradients summed over the sequence shards (and an MoE layer's, whose experts
// saw only this rank's tokens under sp).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/vocab_parallel_ce.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

void Model::tp_allreduce(float* data, size_t count) {
  if (tp_status_.ok()) tp_status_ = tp_.comm->allreduce_sum(data, count);
}

// Gathers every rank's `rows` rows of hidden_size into tp_full_ (in rank order) and returns it.
const float* Model::tp_gather_rows(const float* mine, int rows) {
  const size_t n = static_cast<size_t>(rows) * spec_.hidden_size;
  if (tp_status_.ok()) tp_status_ = tp_.comm->allgather(tp_full_, mine, n);
  return tp_full_;
}

void Model::tp_reduce_scatter(float* out, const float* full, size_t rows_per_rank, int width) {
  if (tp_status_.ok())
    tp_status_ = tp_.comm->reduce_scatter(out, full, rows_per_rank * static_cast<size_t>(width));
}

void Model::tp_row_parallel_out(float* out, float* partial, int N) {
  const int C = spec_.hidden_size;
  if (tp_.sequence_parallel) {
    tp_reduce_scatter(out, partial, N / tp_.size, C);
  } else {
    CANN_CHECK(out == partial) << "without sequence parallelism the reduction is in place";
    tp_allreduce(partial, static_cast<size_t>(N) * C);
  }
}

float* Model::tp_column_parallel_dinput(float* d, int N) {
  const int C = spec_.hidden_size;
  if (!tp_.sequence_parallel) {
    tp_allreduce(d, static_cast<size_t>(N) * C);
    return d;
  }
  tp_reduce_scatter(tp_full_, d, N / tp_.size, C);
  return tp_full_;
}

void Model::norm_backward_tp(float* dx, float* dw, float* db, const float* dy, const float* x,
                             const float* w, const float* mean, const float* rstd, int rows,
                             int C) {
  const bool rms = spec_.norm == NormKind::kRmsNorm;
  auto run = [&](float* gw, float* gb) {
    if (rms)
      rmsnorm_backward(dx, gw, dy, x, w, rstd, rows, C);
    else
      layernorm_backward(dx, gw, gb, dy, x, w, mean, rstd, rows, C);
  };
  if (tp_.size == 1 || !tp_.sequence_parallel) {
    // Every rank saw every row: the weight gradients are already whole (and equal).
    run(dw, db);
    return;
  }
  // Only this micro-step's contribution is summed over the ranks: dw and db accumulate over
  // micro-steps, and what they hold already is whole.
  float* sdw = tp_lngrad_;
  float* sdb = tp_lngrad_ + C;
  std::fill(tp_lngrad_, tp_lngrad_ + 2 * C, 0.0f);
  run(sdw, sdb);
  tp_allreduce(tp_lngrad_, 2 * static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    dw[c] += sdw[c];
    if (db != nullptr) db[c] += sdb[c];
  }
}

void Model::moe_grads_sum_begin(const MoeOffsets& o) {
  if (tp_.rank == 0) return;
  float* g = grads_.data() + o.routerw;
  std::fill(g, g + moe_grad_floats_, 0.0f);
}

void Model::moe_grads_sum_end(const MoeOffsets& o) {
  tp_allreduce(grads_.data() + o.routerw, moe_grad_floats_);
}

// Losses of all N rows on every rank, from three all-reduced numbers per row.
void Model::vocab_parallel_loss(int N) {
  vocab_ce_local_max(tp_rowmax_, logits_, N, vocab_, vocab_valid_);
  if (tp_status_.ok()) tp_status_ = tp_.comm->allreduce_max(tp_rowmax_, static_cast<size_t>(N));
  vocab_ce_local_sums(tp_sums_, logits_, tp_rowmax_, targets_, N, vocab_, vocab_valid_,
                      vocab_begin_);
  tp_allreduce(tp_sums_, 2 * static_cast<size_t>(N));
  vocab_ce_losses(losses_, tp_shift_, tp_rowmax_, tp_sums_, targets_, N);
}

}  // namespace cann::model
