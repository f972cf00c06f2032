// The recommendation models' passes; see rec_model.h for the data flow of each.
#include "recsys/rec_model.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/click_loss.h"
#include "kernels/cpu/dot_interaction.h"
#include "kernels/cpu/embedding_bag.h"
#include "kernels/cpu/linear.h"

namespace cann::recsys {
namespace {

// Adds an MLP's tensors to the table, layer l of MLP `name` as "name.l.weight" (out,in) and
// "name.l.bias"; `first_layer` numbers the layers across MLPs (ParamTable's layer index).
std::vector<MlpLayer> place_mlp(model::ParamTable* table, const std::string& name, int in,
                                const std::vector<int>& widths, int* first_layer) {
  std::vector<MlpLayer> mlp;
  for (size_t i = 0; i < widths.size(); ++i) {
    const int w = widths[i];
    const std::string prefix = name + "." + std::to_string(i);
    const size_t wi =
        table->add(prefix + ".weight", {w, in}, *first_layer, model::TpSplit::kReplicated, true);
    const size_t bi =
        table->add(prefix + ".bias", {w}, *first_layer, model::TpSplit::kReplicated, false);
    mlp.push_back({in, w, static_cast<int64_t>(table->at(wi).offset),
                   static_cast<int64_t>(table->at(bi).offset)});
    ++*first_layer;
    in = w;
  }
  return mlp;
}

// DLRM's initialization: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out).
void init_mlp(const std::vector<MlpLayer>& mlp, float* dense, Rng& rng) {
  for (const MlpLayer& l : mlp) {
    const float sw = static_cast<float>(std::sqrt(2.0 / (l.in + l.out)));
    const float sb = static_cast<float>(std::sqrt(1.0 / l.out));
    for (int64_t i = 0; i < static_cast<int64_t>(l.in) * l.out; ++i)
      dense[l.w + i] = sw * rng.normal();
    for (int i = 0; i < l.out; ++i) dense[l.b + i] = sb * rng.normal();
  }
}

}  // namespace

RecModel::RecModel(const RecSpec& spec, uint64_t seed) : spec_(spec) {
  int layer = 0;
  const int C = spec.embedding_dim, F = spec.sparse_features;
  if (spec.architecture == RecArchitecture::kDlrm) {
    bottom_ = place_mlp(&table_, "bottom_mlp", spec.dense_features, spec.bottom_mlp, &layer);
    top_ = place_mlp(&table_, "top_mlp", kernels::dot_interaction_width(F + 1, C), spec.top_mlp,
                     &layer);
  } else {
    user_tower_ = place_mlp(&table_, "user_tower", spec.user_tower_input(), spec.tower_mlp, &layer);
    item_tower_ = place_mlp(&table_, "item_tower", spec.item_tower_input(), spec.tower_mlp, &layer);
  }
  CANN_CHECK(static_cast<int64_t>(table_.num_parameters()) == spec.dense_parameters());
  // Alignment padding between tensors stays zero in the parameters and the gradients.
  dense_.assign(table_.total_floats(), 0.0f);
  dense_grad_.assign(table_.total_floats(), 0.0f);
  Rng rng(seed);
  for (const auto* mlp : {&bottom_, &top_, &user_tower_, &item_tower_})
    init_mlp(*mlp, dense_.data(), rng);
}

std::vector<DenseTensor> RecModel::dense_tensors() const {
  std::vector<DenseTensor> out;
  for (const model::TensorInfo& t : table_.tensors())
    out.push_back({t.name, static_cast<int64_t>(t.offset), static_cast<int64_t>(t.numel)});
  return out;
}
void RecModel::mlp_forward(const std::vector<MlpLayer>& mlp, bool relu_last, const float* x, int B,
                           MlpActs* acts) {
  acts->outs.resize(mlp.size());
  for (size_t i = 0; i < mlp.size(); ++i) {
    const MlpLayer& l = mlp[i];
    std::vector<float>& y = acts->outs[i];
    y.resize(static_cast<size_t>(B) * l.out);
    kernels::linear_forward(y.data(), i == 0 ? x : acts->outs[i - 1].data(), dense_.data() + l.w,
                            dense_.data() + l.b, B, l.in, l.out);
    if (relu_last || i + 1 < mlp.size()) kernels::relu_forward(y.data(), y.data(), y.size());
  }
}

void RecModel::mlp_backward(const std::vector<MlpLayer>& mlp, bool relu_last, const float* x, int B,
                            MlpActs* acts, std::vector<float>& dy, float* dx) {
  std::vector<float> dprev;
  for (size_t i = mlp.size(); i-- > 0;) {
    const MlpLayer& l = mlp[i];
    if (relu_last || i + 1 < mlp.size())
      kernels::relu_backward(dy.data(), dy.data(), acts->outs[i].data(), dy.size());
    float* dxi = dx;
    if (i > 0) {
      dprev.resize(static_cast<size_t>(B) * l.in);
      dxi = dprev.data();
    }
    kernels::linear_backward(dxi, dense_grad_.data() + l.w, dense_grad_.data() + l.b, dy.data(),
                             i == 0 ? x : acts->outs[i - 1].data(), dense_.data() + l.w, B, l.in,
                             l.out);
    if (i > 0) dy.swap(dprev);
  }
}

void RecModel::pool(const ClickBatch& batch, const PulledRows& pulled, int f0, int f1, float* out,
                    int ldo, int col) {
  const int B = batch.batch, C = spec_.embedding_dim;
  for (int f = f0; f < f1; ++f)
    kernels::embedding_bag_forward(out + col + (f - f0) * C, ldo, pulled[f].rows.data(),
                                   batch.offsets.data() + static_cast<int64_t>(f) * B,
                                   pulled[f].row_index.data(), B, C, spec_.pooling);
}

void RecModel::unpool(const ClickBatch& batch, const PulledRows& pulled, int f0, int f1,
                      const float* dout, int ldo, int col, RowGrads* row_grads) {
  const int B = batch.batch, C = spec_.embedding_dim;
  for (int f = f0; f < f1; ++f) {
    std::vector<float>& g = (*row_grads)[f];
    g.assign(pulled[f].row_ids.size() * C, 0.0f);
    kernels::embedding_bag_backward(g.data(), dout + col + (f - f0) * C, ldo,
                                    batch.offsets.data() + static_cast<int64_t>(f) * B,
                                    pulled[f].row_index.data(), B, C, spec_.pooling);
  }
}

double RecModel::forward_backward(const ClickBatch& batch, const PulledRows& pulled,
                                  RowGrads* row_grads, float loss_scale) {
  row_grads->resize(spec_.sparse_features);
  return spec_.architecture == RecArchitecture::kDlrm
             ? dlrm_pass(batch, pulled, row_grads, loss_scale, nullptr)
             : two_tower_pass(batch, pulled, row_grads, loss_scale, nullptr);
}

void RecModel::score(const ClickBatch& batch, const PulledRows& pulled, float* logits) {
  if (spec_.architecture == RecArchitecture::kDlrm)
    dlrm_pass(batch, pulled, nullptr, 0.0f, logits);
  else
    two_tower_pass(batch, pulled, nullptr, 0.0f, logits);
}

double RecModel::dlrm_pass(const ClickBatch& batch, const PulledRows& pulled, RowGrads* row_grads,
                           float loss_scale, float* logits) {
  const int B = batch.batch, C = spec_.embedding_dim, F = spec_.sparse_features;
  const int ld = (F + 1) * C, W = kernels::dot_interaction_width(F + 1, C);
  mlp_forward(bottom_, true, batch.dense.data(), B, &bottom_acts_);
  stack_.resize(static_cast<size_t>(B) * ld);
  const float* h = bottom_acts_.outs.back().data();
  for (int b = 0; b < B; ++b) std::memcpy(stack_.data() + b * ld, h + b * C, sizeof(float) * C);
  pool(batch, pulled, 0, F, stack_.data(), ld, C);
  inter_.resize(static_cast<size_t>(B) * W);
  kernels::dot_interaction_forward(inter_.data(), stack_.data(), B, F + 1, C);
  mlp_forward(top_, false, inter_.data(), B, &top_acts_);
  const float* logit = top_acts_.outs.back().data();
  if (logits) {
    std::memcpy(logits, logit, sizeof(float) * B);
    return 0.0;
  }
  const double loss = kernels::bce_with_logits_forward(logit, batch.labels.data(), B);
  std::vector<float> dy(B);
  kernels::bce_with_logits_backward(dy.data(), logit, batch.labels.data(), B, loss_scale);
  dinter_.resize(inter_.size());
  mlp_backward(top_, false, inter_.data(), B, &top_acts_, dy, dinter_.data());
  dstack_.resize(stack_.size());
  kernels::dot_interaction_backward(dstack_.data(), dinter_.data(), stack_.data(), B, F + 1, C);
  std::vector<float> dh(static_cast<size_t>(B) * C);
  for (int b = 0; b < B; ++b)
    std::memcpy(dh.data() + b * C, dstack_.data() + b * ld, sizeof(float) * C);
  mlp_backward(bottom_, true, batch.dense.data(), B, &bottom_acts_, dh, nullptr);
  unpool(batch, pulled, 0, F, dstack_.data(), ld, C, row_grads);
  return loss;
}

double RecModel::two_tower_pass(const ClickBatch& batch, const PulledRows& pulled,
                                RowGrads* row_grads, float loss_scale, float* logits) {
  const int B = batch.batch, C = spec_.embedding_dim, F = spec_.sparse_features;
  const int Fu = spec_.user_features, Fi = F - Fu, E = spec_.tower_mlp.back();
  // Each tower's input row: its pooled bags, then its dense features.
  const int Wu = spec_.user_tower_input(), Wi = spec_.item_tower_input();
  const int D = spec_.dense_features, Du = spec_.user_dense_features;
  user_in_.resize(static_cast<size_t>(B) * Wu);
  item_in_.resize(static_cast<size_t>(B) * Wi);
  pool(batch, pulled, 0, Fu, user_in_.data(), Wu, 0);
  pool(batch, pulled, Fu, F, item_in_.data(), Wi, 0);
  for (int b = 0; b < B; ++b) {
    const float* dense = batch.dense.data() + static_cast<size_t>(b) * D;
    std::memcpy(user_in_.data() + static_cast<size_t>(b) * Wu + Fu * C, dense, sizeof(float) * Du);
    std::memcpy(item_in_.data() + static_cast<size_t>(b) * Wi + Fi * C, dense + Du,
                sizeof(float) * (D - Du));
  }
  mlp_forward(user_tower_, false, user_in_.data(), B, &user_acts_);
  mlp_forward(item_tower_, false, item_in_.data(), B, &item_acts_);
  const float* u = user_acts_.outs.back().data();
  const float* v = item_acts_.outs.back().data();
  const bool bce = spec_.tower_loss == TowerLoss::kBce;
  if (logits || bce) {
    float* z = logits;
    if (!z) {
      tower_logits_.resize(B);
      z = tower_logits_.data();
    }
    for (int b = 0; b < B; ++b) {
      float dot = 0.0f;
      for (int e = 0; e < E; ++e) dot += u[b * E + e] * v[b * E + e];
      z[b] = dot / spec_.temperature;
    }
    if (logits) return 0.0;
  }
  std::vector<float> du(static_cast<size_t>(B) * E, 0.0f), dv(du.size(), 0.0f);
  double loss = 0.0;
  if (bce) {
    // d loss / d z_b = dz_b; z_b = <u_b, v_b> / t.
    loss = kernels::bce_with_logits_forward(tower_logits_.data(), batch.labels.data(), B);
    std::vector<float> dz(B);
    kernels::bce_with_logits_backward(dz.data(), tower_logits_.data(), batch.labels.data(), B,
                                      loss_scale);
    for (int b = 0; b < B; ++b)
      for (int e = 0; e < E; ++e) {
        du[b * E + e] = dz[b] * v[b * E + e] / spec_.temperature;
        dv[b * E + e] = dz[b] * u[b * E + e] / spec_.temperature;
      }
  } else {
    if (!softmax_grads(batch, u, v, E, loss_scale, &du, &dv, &loss)) {
      for (int f = 0; f < F; ++f) (*row_grads)[f].assign(pulled[f].row_ids.size() * C, 0.0f);
      return 0.0;
    }
  }
  std::vector<float> duser(user_in_.size()), ditem(item_in_.size());
  mlp_backward(user_tower_, false, user_in_.data(), B, &user_acts_, du, duser.data());
  mlp_backward(item_tower_, false, item_in_.data(), B, &item_acts_, dv, ditem.data());
  unpool(batch, pulled, 0, Fu, duser.data(), Wu, 0, row_grads);
  unpool(batch, pulled, Fu, F, ditem.data(), Wi, 0, row_grads);
  return loss;
}

bool RecModel::softmax_grads(const ClickBatch& batch, const float* u, const float* v, int E,
                             float loss_scale, std::vector<float>* du, std::vector<float>* dv,
                             double* loss) {
  const int B = batch.batch;
  // Queries: the clicked rows. Candidates: their items, then (impressions) the unclicked items.
  std::vector<int> queries, candidates;
  for (int b = 0; b < B; ++b)
    if (batch.labels[b] > 0.5f) queries.push_back(b);
  candidates = queries;
  if (spec_.negatives == Negatives::kInBatchAndImpressions)
    for (int b = 0; b < B; ++b)
      if (batch.labels[b] <= 0.5f) candidates.push_back(b);
  const int P = static_cast<int>(queries.size()), NV = static_cast<int>(candidates.size());
  if (P == 0) return false;
  std::vector<float> uq(static_cast<size_t>(P) * E), vc(static_cast<size_t>(NV) * E);
  for (int i = 0; i < P; ++i) std::memcpy(&uq[i * E], u + queries[i] * E, sizeof(float) * E);
  for (int j = 0; j < NV; ++j) std::memcpy(&vc[j * E], v + candidates[j] * E, sizeof(float) * E);
  std::vector<float> probs(static_cast<size_t>(P) * NV), duq(uq.size()), dvc(vc.size(), 0.0f);
  *loss = kernels::in_batch_softmax_forward(probs.data(), uq.data(), vc.data(), P, NV, E,
                                            spec_.temperature);
  kernels::in_batch_softmax_backward(duq.data(), dvc.data(), probs.data(), uq.data(), vc.data(), P,
                                     NV, E, spec_.temperature, loss_scale);
  for (int i = 0; i < P; ++i)
    for (int e = 0; e < E; ++e) (*du)[queries[i] * E + e] += duq[i * E + e];
  for (int j = 0; j < NV; ++j)
    for (int e = 0; e < E; ++e) (*dv)[candidates[j] * E + e] += dvc[j * E + e];
  return true;
}

}  // namespace cann::recsys
