// A user's own model, built from the engine's layers in a project of its own (the installed
// cann_train package), trained data-parallel over the engine's process groups:
//
//   1. the model: linear (16 -> 32), GeLU, linear (32 -> 4), softmax cross-entropy, its
//      parameters in one flat buffer laid out by a ParamTable, as the engine's models are;
//   2. its gradient checked tensor by tensor against central differences of its loss;
//   3. trained by 4 ranks (threads over an in-memory store), each on its quarter of every
//      batch, gradients averaged by all-reduce, the engine's AdamW on every rank, and the ranks'
//      parameters compared at the end;
//   4. a process group made from a rank list (ranks 0 and 2 of the 4, as torch.distributed's
//      new_group(ranks=[0, 2])) all-reducing over its members only.
// Exit status 0 when every check holds.
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "cann_train/comm/group.h"
#include "cann_train/comm/store.h"
#include "cann_train/core/rng.h"
#include "cann_train/core/threads.h"
#include "cann_train/kernels/cpu/cross_entropy.h"
#include "cann_train/kernels/cpu/gelu.h"
#include "cann_train/kernels/cpu/linear.h"
#include "cann_train/model/param_table.h"
#include "cann_train/optim/adamw.h"

using namespace cann;

namespace {

constexpr int kIn = 16, kHidden = 32, kClasses = 4;

// The model's layout and its passes over a batch of N examples.
struct TinyClassifier {
  model::ParamTable table;
  size_t w1, b1, w2, b2;  // tensor indices
  TinyClassifier() {
    w1 = table.add("fc1.weight", {kHidden, kIn}, 0, model::TpSplit::kReplicated, true);
    b1 = table.add("fc1.bias", {kHidden}, 0, model::TpSplit::kReplicated, false);
    w2 = table.add("fc2.weight", {kClasses, kHidden}, 1, model::TpSplit::kReplicated, true);
    b2 = table.add("fc2.bias", {kClasses}, 1, model::TpSplit::kReplicated, false);
  }
  const float* at(const std::vector<float>& p, size_t t) const {
    return p.data() + table.at(t).offset;
  }
  float* at(std::vector<float>& p, size_t t) const { return p.data() + table.at(t).offset; }

  // Mean loss over the batch; with grads, accumulates d(loss * scale)/d(params) into it.
  double pass(const std::vector<float>& p, const float* x, const int* y, int N,
              std::vector<float>* grads, float scale = 1.0f) const {
    std::vector<float> h(N * kHidden), a(N * kHidden), logits(N * kClasses), losses(N);
    kernels::linear_forward(h.data(), x, at(p, w1), at(p, b1), N, kIn, kHidden);
    kernels::gelu_forward(a.data(), h.data(), h.size());
    kernels::linear_forward(logits.data(), a.data(), at(p, w2), at(p, b2), N, kHidden, kClasses);
    kernels::softmax_crossentropy_forward(losses.data(), logits.data(), y, N, kClasses);
    double loss = 0;
    for (float l : losses) loss += l;
    if (!grads) return loss / N;
    std::vector<float> dlogits(N * kClasses), da(N * kHidden), dh(N * kHidden);
    kernels::softmax_crossentropy_backward(dlogits.data(), logits.data(), y, scale / N, N,
                                           kClasses);
    kernels::linear_backward(da.data(), at(*grads, w2), at(*grads, b2), dlogits.data(), a.data(),
                             at(p, w2), N, kHidden, kClasses);
    kernels::gelu_backward(dh.data(), h.data(), da.data(), h.size());
    kernels::linear_backward(nullptr, at(*grads, w1), at(*grads, b1), dh.data(), x, at(p, w1), N,
                             kIn, kHidden);
    return loss / N;
  }
};

// A planted task: the class is the argmax of a fixed random linear map of x.
void make_data(int N, uint64_t seed, std::vector<float>* x, std::vector<int>* y) {
  Rng teacher(7), rng(seed);
  std::vector<float> t(kClasses * kIn);
  for (float& v : t) v = teacher.normal();
  x->resize(N * kIn);
  y->resize(N);
  for (int n = 0; n < N; ++n) {
    int best = 0;
    double best_score = -1e30;
    for (int i = 0; i < kIn; ++i) (*x)[n * kIn + i] = rng.normal();
    for (int c = 0; c < kClasses; ++c) {
      double s = 0;
      for (int i = 0; i < kIn; ++i) s += t[c * kIn + i] * (*x)[n * kIn + i];
      if (s > best_score) best_score = s, best = c;
    }
    (*y)[n] = best;
  }
}

std::vector<float> init_params(const TinyClassifier& m) {
  std::vector<float> p(m.table.total_floats(), 0.0f);
  Rng rng(1);
  for (size_t t : {m.w1, m.w2}) {
    const auto& info = m.table.at(t);
    const float scale = 1.0f / std::sqrt(static_cast<float>(info.shape[1]));
    for (size_t i = 0; i < info.numel; ++i) p[info.offset + i] = scale * rng.normal();
  }
  return p;
}

// Central differences along a random unit direction and along the gradient itself, per tensor.
bool check_gradients(const TinyClassifier& m) {
  std::vector<float> x;
  std::vector<int> y;
  make_data(24, 3, &x, &y);
  std::vector<float> p = init_params(m), g(p.size(), 0.0f);
  m.pass(p, x.data(), y.data(), 24, &g);
  Rng rng(5);
  bool ok = true;
  for (const auto& info : m.table.tensors()) {
    double gn = 0;
    for (size_t i = 0; i < info.numel; ++i) gn += double(g[info.offset + i]) * g[info.offset + i];
    gn = std::sqrt(gn);
    double worst = 0;
    for (int which = 0; which < 2; ++which) {
      std::vector<double> d(info.numel);
      double dn = 0;
      for (size_t i = 0; i < info.numel; ++i) {
        d[i] = which == 0 ? rng.normal() : g[info.offset + i];
        dn += d[i] * d[i];
      }
      dn = std::sqrt(dn);
      double analytic = 0;
      for (size_t i = 0; i < info.numel; ++i) analytic += g[info.offset + i] * d[i] / dn;
      const double h = 1e-2;
      std::vector<float> q = p;
      for (size_t i = 0; i < info.numel; ++i)
        q[info.offset + i] = p[info.offset + i] + h * d[i] / dn;
      const double lp = m.pass(q, x.data(), y.data(), 24, nullptr);
      for (size_t i = 0; i < info.numel; ++i)
        q[info.offset + i] = p[info.offset + i] - h * d[i] / dn;
      const double lm = m.pass(q, x.data(), y.data(), 24, nullptr);
      worst = std::max(worst, std::abs((lp - lm) / (2 * h) - analytic) / std::max(gn, 1e-2));
    }
    std::printf("gradient check %-11s |g| %.3e  rel err %.1e\n", info.name.c_str(), gn, worst);
    ok &= worst < 5e-2;
  }
  return ok;
}

}  // namespace

int main() {
  set_num_threads(1);
  TinyClassifier model;
  bool ok = check_gradients(model);

  constexpr int kRanks = 4, kBatch = 64, kSteps = 300;
  auto store = comm::open_store("memory://custom-model");
  if (!store.ok()) {
    std::fprintf(stderr, "custom_model: %s\n", store.status().message().c_str());
    return 1;
  }
  std::vector<std::vector<float>> final_params(kRanks);
  std::vector<double> first(kRanks), last(kRanks);
  std::vector<double> subgroup_sum(kRanks, -1);
  std::vector<int> failed(kRanks, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      comm::GroupConfig gc;
      gc.backend = "gloo";
      gc.store = *store;
      gc.prefix = "example/world";
      gc.rank = r;
      gc.size = kRanks;
      auto world = comm::create_group(gc);
      if (!world.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, world.status().message().c_str());
        failed[r] = 1;
        return;
      }
      // 4. A group of ranks 0 and 2: its members all-reduce their rank numbers (0 + 2).
      auto evens = (*world)->new_subgroup({0, 2}, "evens");
      if (!evens.ok()) {
        failed[r] = 1;
        return;
      }
      if (*evens) {
        float v = static_cast<float>(r);
        if (!(*evens)
                 ->allreduce(&v, 1, comm::DataType::kFloat32, comm::ReduceOp::kSum)
                 ->wait()
                 .ok())
          failed[r] = 1;
        subgroup_sum[r] = v;
      }
      // 3. Data-parallel training: rank r takes rows [r*16, r*16 + 16) of every batch.
      std::vector<float> p = init_params(model), g(p.size());
      optim::AdamWConfig ac;
      ac.weight_decay = 0.0f;
      optim::AdamW adam(model.table, ac);
      const int local = kBatch / kRanks;
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> x;
        std::vector<int> y;
        make_data(kBatch, 1000 + step, &x, &y);
        std::fill(g.begin(), g.end(), 0.0f);
        const double loss =
            model.pass(p, x.data() + r * local * kIn, y.data() + r * local, local, &g);
        float mean = static_cast<float>(loss);
        if (!(*world)
                 ->allreduce(g.data(), g.size(), comm::DataType::kFloat32, comm::ReduceOp::kAvg)
                 ->wait()
                 .ok() ||
            !(*world)
                 ->allreduce(&mean, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)
                 ->wait()
                 .ok()) {
          failed[r] = 1;
          return;
        }
        adam.step(p.data(), g.data(), 3e-3f);
        if (step == 0) first[r] = mean;
        last[r] = mean;
      }
      final_params[r] = p;
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) ok &= !failed[r];
  if (!ok) {
    std::printf("FAIL: a rank failed\n");
    return 1;
  }
  bool same = true;
  for (int r = 1; r < kRanks; ++r) same &= final_params[r] == final_params[0];
  std::printf(
      "data parallel over %d ranks: loss %.4f -> %.4f after %d steps; ranks' parameters "
      "%s\n",
      kRanks, first[0], last[0], kSteps, same ? "identical" : "DIFFER");
  std::printf(
      "group of ranks {0, 2}: all-reduce gives %.0f on rank 0 and %.0f on rank 2; ranks 1 "
      "and 3 are not members\n",
      subgroup_sum[0], subgroup_sum[2]);
  ok &= same && last[0] < 0.5 * first[0] && subgroup_sum[0] == 2 && subgroup_sum[2] == 2 &&
        subgroup_sum[1] == -1 && subgroup_sum[3] == -1;
  std::printf("%s\n", ok ? "custom_model: every check holds" : "custom_model: FAIL");
  return ok ? 0 : 1;
}
