// The dense part of a recommendation model and its forward and backward passes over the rows a
// batch pulled (embedding_store.h). All dense parameters live in one flat buffer laid out by a
// model::ParamTable (the MLPs' weights and biases, layer by layer; weights decay, biases do not),
// so data parallelism reduces one buffer and the optimizers (Adam, 1-bit Adam) run over it as
// they run over the transformers'.
//
// DLRM: dense (B,D) -> bottom MLP (ReLU after every layer) -> h (B,C); h and the F pooled bags
// stacked (B,F+1,C) -> dot interaction (B, C + (F+1)F/2) -> top MLP (ReLU after every layer but
// the last) -> click logit (B) -> binary cross-entropy.
// Two-tower: the user's pooled bags concatenated, then the user's dense features (B, Fu*C + Du)
// -> user tower -> u (B,E); the item's likewise -> v (B,E); score = <u,v> / temperature. Training:
// the clicked rows' users against the clicked rows' items (each user's own item the positive, the
// other clicked items in-batch negatives, plus the unclicked rows' items under negatives:
// in_batch_and_impressions) with a softmax, or (loss: bce) every impression with binary
// cross-entropy on the score. Both towers end without an activation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_table.h"
#include "recsys/click_batch.h"
#include "recsys/embedding_store.h"
#include "recsys/rec_spec.h"

namespace cann::recsys {

// One fully connected layer's place in the flat buffer: W (out,in) at w, b (out) at b.
struct MlpLayer {
  int in = 0, out = 0;
  int64_t w = 0, b = 0;
};

// A named tensor of the flat dense buffer, e.g. "top_mlp.1.weight".
struct DenseTensor {
  std::string name;
  int64_t offset = 0, size = 0;
};

class RecModel {
 public:
  RecModel(const RecSpec& spec, uint64_t seed);

  const RecSpec& spec() const { return spec_; }
  int64_t num_dense() const { return static_cast<int64_t>(dense_.size()); }
  const model::ParamTable& table() const { return table_; }
  float* dense() { return dense_.data(); }
  const float* dense() const { return dense_.data(); }
  float* dense_grad() { return dense_grad_.data(); }
  // Every weight and bias in buffer order.
  std::vector<DenseTensor> dense_tensors() const;

  // One training pass: returns the batch's loss, accumulates the dense gradient into
  // dense_grad() (scaled by loss_scale, e.g. 1/ranks) and overwrites row_grads with the pulled
  // rows' gradients. Two-tower: a batch without a click has loss 0 and no gradient.
  double forward_backward(const ClickBatch& batch, const PulledRows& pulled, RowGrads* row_grads,
                          float loss_scale = 1.0f);
  // Click logits (B) for evaluation: DLRM's logit; the two towers' <u,v>/temperature.
  void score(const ClickBatch& batch, const PulledRows& pulled, float* logits);

 private:
  struct MlpActs {
    std::vector<std::vector<float>> outs;  // per layer (B, out), after its activation
  };
  void mlp_forward(const std::vector<MlpLayer>& mlp, bool relu_last, const float* x, int B,
                   MlpActs* acts);
  // dy (B, out of the last layer) is consumed; dx (B, in of the first), when not null, is written.
  void mlp_backward(const std::vector<MlpLayer>& mlp, bool relu_last, const float* x, int B,
                    MlpActs* acts, std::vector<float>& dy, float* dx);
  // Pooled bags of features [f0, f1) into out (B, f1-f0, C) with row stride `ldo` floats per
  // example, starting at column `col`.
  void pool(const ClickBatch& batch, const PulledRows& pulled, int f0, int f1, float* out, int ldo,
            int col);
  void unpool(const ClickBatch& batch, const PulledRows& pulled, int f0, int f1, const float* dout,
              int ldo, int col, RowGrads* row_grads);

  double dlrm_pass(const ClickBatch& batch, const PulledRows& pulled, RowGrads* row_grads,
                   float loss_scale, float* logits);
  double two_tower_pass(const ClickBatch& batch, const PulledRows& pulled, RowGrads* row_grads,
                        float loss_scale, float* logits);

  // The softmax over candidates: fills du, dv (B,E, zeroed by the caller) for the rows that take
  // part and sets the loss; false (nothing set) when the batch has no click.
  bool softmax_grads(const ClickBatch& batch, const float* u, const float* v, int E,
                     float loss_scale, std::vector<float>* du, std::vector<float>* dv,
                     double* loss);

  RecSpec spec_;
  model::ParamTable table_;
  std::vector<float> dense_, dense_grad_;
  std::vector<MlpLayer> bottom_, top_, user_tower_, item_tower_;
  // Activations of the last pass, reused between steps.
  MlpActs bottom_acts_, top_acts_, user_acts_, item_acts_;
  std::vector<float> stack_, inter_, dstack_, dinter_, user_in_, item_in_, tower_logits_;
};

}  // namespace cann::recsys
