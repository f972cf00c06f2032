// A user's operator in the engine's transformer: an activation with its own forward, a
// hand-written backward and a declared distribution rule (model/custom_op.h), registered before
// any spec is read and then named by hidden_act like a built-in one.
//
// The op, rms_silu: y_i = silu(x_i) / r with r = sqrt(mean_j x_j^2 + eps) over the row of
// hidden units. Every output depends on the whole row, so under tensor parallelism (which
// splits the hidden units over the ranks) it declares kFullRow: the engine gathers whole rows
// over the tp ranks for it, forward and backward.
//
//   custom_op            checks the backward against central differences, trains a small GPT
//                        with it in this process, then as the agent of two workers (this
//                        program again) under dp=2 and under tp=2, and compares the losses
//   custom_op LAYOUT MODEL OUT   (the workers' form, started by the agent)
// Exit status 0 when the gradient check and both comparisons hold.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cann_train/core/rng.h"
#include "cann_train/elastic/agent.h"
#include "cann_train/model/custom_op.h"
#include "cann_train/train/dist_env.h"
#include "cann_train/train/trainer.h"

using namespace cann;

namespace {

constexpr double kEps = 1e-5;

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double silu_grad(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

void rms_silu_forward(float* y, const float* x, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<long>(n) * F;
    double ms = 0;
    for (int j = 0; j < F; ++j) ms += double(xr[j]) * xr[j];
    const double r = std::sqrt(ms / F + kEps);
    for (int j = 0; j < F; ++j)
      y[static_cast<long>(n) * F + j] = static_cast<float>(silu(xr[j]) / r);
  }
}

// y_i = s_i / r, d(1/r)/dx_k = -x_k / (F r^3):  dx_k = silu'(x_k) dy_k / r - x_k/(F r^3) sum_i dy_i
// s_i
void rms_silu_backward(float* dx, const float* x, const float* dy, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<long>(n) * F;
    const float* dyr = dy + static_cast<long>(n) * F;
    double ms = 0, dot = 0;
    for (int j = 0; j < F; ++j) {
      ms += double(xr[j]) * xr[j];
      dot += double(dyr[j]) * silu(xr[j]);
    }
    const double r = std::sqrt(ms / F + kEps);
    for (int k = 0; k < F; ++k)
      dx[static_cast<long>(n) * F + k] =
          static_cast<float>(silu_grad(xr[k]) * dyr[k] / r - xr[k] / (F * r * r * r) * dot);
  }
}

// The backward against central differences of sum(dy * forward(x)), every input element.
bool check_gradient() {
  const int N = 3, F = 10;
  Rng rng(3);
  std::vector<float> x(N * F), dy(N * F), dx(N * F), y(N * F);
  for (float& v : x) v = rng.normal();
  for (float& v : dy) v = rng.normal();
  rms_silu_backward(dx.data(), x.data(), dy.data(), N, F);
  double worst = 0;
  for (int i = 0; i < N * F; ++i) {
    auto loss = [&](float xi) {
      std::vector<float> xs = x;
      xs[i] = xi;
      rms_silu_forward(y.data(), xs.data(), N, F);
      double l = 0;
      for (int j = 0; j < N * F; ++j) l += double(dy[j]) * y[j];
      return l;
    };
    const float h = 1e-2f;
    const double fd = (loss(x[i] + h) - loss(x[i] - h)) / (2.0 * h);
    worst = std::max(worst, std::abs(fd - dx[i]) / std::max(1.0, std::abs(double(dx[i]))));
  }
  std::printf("rms_silu backward against central differences: max relative error %.1e\n", worst);
  return worst < 1e-2;  // float forward, step 1e-2: the difference quotient's error is ~1e-4
}

train::TrainConfig config_for(const std::string& model, const std::string& layout) {
  train::TrainConfig c;
  c.model = model;
  c.steps = 30;
  c.batch_size = 8;
  c.seq_len = 32;
  c.threads = 1;
  c.eval_every = 0;
  c.sample_tokens = 0;
  c.quiet = true;
  if (!layout.empty()) {
    auto s = plan::parse_strategy(layout);
    if (s.ok()) c.strategy = *s;
  }
  return c;
}

// Trains; returns the last step's loss, or NaN.
double train_once(const train::TrainConfig& c, const train::DistEnv* env) {
  auto trainer = train::Trainer::create(c, env);
  if (!trainer.ok()) {
    std::fprintf(stderr, "custom_op: %s\n", trainer.status().message().c_str());
    return NAN;
  }
  train::RunSummary summary;
  if (Status s = (*trainer)->run(&summary); !s.ok()) {
    std::fprintf(stderr, "custom_op: %s\n", s.message().c_str());
    return NAN;
  }
  return summary.last_loss;
}

}  // namespace

int main(int argc, char** argv) {
  model::ActivationOp op;
  op.name = "rms_silu";
  op.forward = rms_silu_forward;
  op.backward = rms_silu_backward;
  op.rule = model::DistributionRule::kFullRow;
  if (Status s = model::register_activation(op); !s.ok()) {
    std::fprintf(stderr, "custom_op: %s\n", s.message().c_str());
    return 1;
  }
  auto env = train::detect_dist_env();
  if (!env.ok()) return 2;
  if (env->has_value()) {  // a worker: LAYOUT MODEL OUT
    if (argc != 4) return 2;
    const double loss = train_once(config_for(argv[2], argv[1]), &**env);
    if ((*env)->rank == 0) std::ofstream(argv[3]) << loss << "\n";
    return std::isnan(loss) ? 1 : 0;
  }
  bool ok = check_gradient();
  const auto dir =
      std::filesystem::temp_directory_path() / ("custom_op_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "gpt_rms_silu.yaml").string();
  std::ofstream(model) << "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\n"
                          "num_attention_heads: 4\nvocab_size: 256\nseq_length: 32\n"
                          "hidden_act: rms_silu\n";
  const double one = train_once(config_for(model, ""), nullptr);
  std::printf("one process: loss %.5f after 30 steps\n", one);
  for (const std::string layout : {"dp=2", "tp=2"}) {
    const std::string out = (dir / (layout.substr(0, 2) + ".loss")).string();
    elastic::AgentConfig agent;
    agent.nproc_per_node = 2;
    agent.worker_args = {layout, model, out};
    auto code = elastic::run_agent(agent);
    double loss = NAN;
    std::ifstream(out) >> loss;
    const bool same = code.ok() && *code == 0 && std::abs(loss - one) < 1e-3;
    std::printf("%s over 2 processes: loss %.5f (%s one process's)\n", layout.c_str(), loss,
                same ? "equal to" : "NOT");
    ok &= same;
  }
  std::filesystem::remove_all(dir);
  std::printf("%s\n", ok ? "custom_op: every check holds" : "custom_op: FAIL");
  return ok ? 0 : 1;
}
