// The start-up lines of a run (see run_description.h).
#include "train/run_description.h"

#include <cstdio>

#include "core/threads.h"
#include "kernels/cpu/gemm.h"

namespace cann::train {
namespace {

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

// "; planner predicts 42.5 MiB (+0.0%)": the planner's figure for this run's strategy on an
// fp32 device (plan/engine_memory.h), beside the engine's own accounting. Empty where the
// planner does not model the run's state (compressed reductions keep error buffers it omits).
std::string planner_memory_note(const RunLayout& layout, double mine) {
  const double predicted = layout.memory.total;
  if (!layout.memory_complete || predicted <= 0) return "";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "; planner predicts %.1f MiB (%+.1f%%)", predicted / (1 << 20),
                100.0 * (predicted - mine) / mine);
  return buf;
}

}  // namespace

size_t memory_bytes(const ModelParts& parts, const StepOptimizer& opt) {
  return opt.parameter_bytes() + opt.gradient_bytes() + opt.optimizer_state_bytes() +
         parts.model().activation_bytes();
}

std::vector<std::string> describe_run(const model::ModelSpec& spec, const RunLayout& layout,
                                      const ModelParts& parts, const StepOptimizer& opt,
                                      const data::Dataset& data, int first_step, int steps) {
  std::vector<std::string> lines;
  char header[512];
  std::snprintf(header, sizeof(header),
                "model %s: %s, %d layers, hidden %d, %d heads%s, %s parameters | batch %d x %d "
                "tokens | %d rank%s x %d threads (linear layers on oneDNN %s, fused attention on "
                "oneDNN fp32) | "
                "steps %d..%d",
                spec.name.c_str(), std::string(model::family_name(spec.family)).c_str(),
                spec.num_hidden_layers, spec.hidden_size, spec.num_attention_heads,
                spec.is_moe() ? (", " + std::to_string(spec.num_local_experts) + " experts top-" +
                                 std::to_string(spec.num_experts_per_tok))
                                    .c_str()
                              : "",
                human_count(parts.num_parameters()).c_str(), layout.global_batch(), layout.seq_len,
                layout.world, layout.world == 1 ? "" : "s", num_threads(),
                kernels::gemm_precision() == kernels::GemmPrecision::kBf16
                    ? "bf16 with fp32 accumulation"
                    : "fp32",
                first_step + 1, steps);
  lines.push_back(header);
  lines.push_back("data " + data.description);
  const double mb = 1.0 / (1 << 20);
  const double mine = static_cast<double>(memory_bytes(parts, opt));
  char mem[256];
  std::snprintf(mem, sizeof(mem),
                "memory per rank: parameters %.1f MiB, gradients %.1f MiB, optimizer state %.1f "
                "MiB, activations %.1f MiB, total %.1f MiB",
                static_cast<double>(opt.parameter_bytes()) * mb,
                static_cast<double>(opt.gradient_bytes()) * mb,
                static_cast<double>(opt.optimizer_state_bytes()) * mb,
                static_cast<double>(parts.model().activation_bytes()) * mb, mine * mb);
  lines.push_back(std::string(mem) + planner_memory_note(layout, mine));
  if (const std::string mesh = parts.describe_mesh(); !mesh.empty()) lines.push_back(mesh);
  if (const std::string pipe = parts.describe_pipeline(); !pipe.empty()) lines.push_back(pipe);
  if (layout.multi_process()) {
    const plan::Strategy& s = layout.strategy;
    const int accum = layout.accum_steps;
    std::string reduced_over;
    if (s.cp > 1)
      reduced_over =
          " (gradients reduced over dp x cp = " + std::to_string(s.dp * s.cp) + " ranks)";
    lines.push_back("data parallel: " + std::to_string(s.dp) + " ranks" + reduced_over + ", " +
                    std::to_string(accum) + " micro-step" + (accum == 1 ? "" : "s") + " of " +
                    std::to_string(layout.micro_batch()) + " per rank, " + opt.describe());
  }
  return lines;
}

}  // namespace cann::train
