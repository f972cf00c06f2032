// Strategy -> cann-train, Megatron-LM and DeepSpeed launch arguments (see launch.h).
#include "plan/launch.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace cann::plan {
namespace {

std::string flag(const std::string& name, long long v) {
  return " \\\n    " + name + " " + std::to_string(v);
}
std::string flag(const std::string& name, const std::string& v = "") {
  return " \\\n    " + name + (v.empty() ? "" : " " + v);
}

std::vector<int> stage_layer_counts(const Prediction& p) {
  std::vector<int> n;
  for (const StageReport& s : p.stages) {
    int c = 0;
    for (const auto& [a, b] : s.layers) c += b - a + 1;
    n.push_back(c);
  }
  return n;
}

}  // namespace

std::string cann_train_args(const PlanInput& in, const Prediction& p) {
  return "cann-train run --model " + in.model.name + " --strategy " + strategy_string(p.strategy) +
         " --nnodes " + std::to_string(in.cluster.nodes) + " --nproc-per-node " +
         std::to_string(in.cluster.devices_per_node);
}

std::string megatron_args(const PlanInput& in, const Prediction& p) {
  const model::ModelSpec& m = in.model;
  const Strategy& s = p.strategy;
  const char* script = m.architecture == model::Architecture::kBert  ? "pretrain_bert.py"
                       : m.architecture == model::Architecture::kVit ? "pretrain_vision_classify.py"
                                                                     : "pretrain_gpt.py";
  std::string out = std::string("torchrun --nnodes ") + std::to_string(in.cluster.nodes) +
                    " --nproc-per-node " + std::to_string(in.cluster.devices_per_node) + " " +
                    script;
  out += flag("--num-layers", m.num_hidden_layers);
  out += flag("--hidden-size", m.hidden_size);
  out += flag("--num-attention-heads", m.num_attention_heads);
  if (m.num_key_value_heads != m.num_attention_heads) {
    out += flag("--group-query-attention");
    out += flag("--num-query-groups", m.num_key_value_heads);
  }
  out += flag("--ffn-hidden-size", m.intermediate_size);
  out += flag("--seq-length", m.seq_length);
  out += flag("--max-position-embeddings", m.seq_length);
  out += flag("--micro-batch-size", s.mbs);
  out += flag("--global-batch-size", s.gbs);
  out += flag("--tensor-model-parallel-size", s.tp);
  out += flag("--pipeline-model-parallel-size", s.pp);
  if (s.vpp > 1)
    out += flag("--num-layers-per-virtual-pipeline-stage", m.num_hidden_layers / (s.pp * s.vpp));
  if (s.sp) out += flag("--sequence-parallel");
  if (s.cp > 1) out += flag("--context-parallel-size", s.cp);
  if (m.is_moe()) {
    out += flag("--num-experts", m.num_local_experts);
    out += flag("--moe-router-topk", m.num_experts_per_tok);
    out += flag("--expert-model-parallel-size", s.ep);
    out += flag("--moe-ffn-hidden-size", m.moe_intermediate_size);
    out += flag("--moe-token-dispatcher-type", "alltoall");
    char cf[32];
    std::snprintf(cf, sizeof(cf), "%g", m.capacity_factor);
    out += flag("--moe-expert-capacity-factor", cf);
  }
  if (s.recompute == Recompute::kSelective) out += flag("--recompute-activations");
  if (s.recompute == Recompute::kFull && s.recompute_every == 1) {
    out += flag("--recompute-granularity", "full");
    out += flag("--recompute-method", "uniform");
    out += flag("--recompute-num-layers", 1);
  } else if (s.recompute == Recompute::kFull) {
    // As many layers of each chunk, the first ones rather than every k-th: the same work and
    // memory.
    out += flag("--recompute-granularity", "full");
    out += flag("--recompute-method", "block");
    out += flag("--recompute-num-layers", m.num_hidden_layers / (s.pp * s.vpp) / s.recompute_every);
  }
  if (s.zero >= 1) out += flag("--use-distributed-optimizer");
  out += flag("--overlap-grad-reduce");
  if (s.zero >= 1) out += flag("--overlap-param-gather");
  out += flag("--bf16");
  // Uneven stages: Megatron-Core takes a different layer count for the first and the last
  // stage when the stages between are equal.
  const std::vector<int> n = stage_layer_counts(p);
  bool uneven = false;
  for (int c : n) uneven |= c != n[0];
  std::string notes;
  if (s.pp > 2 && s.vpp == 1 && uneven) {
    bool middle_equal = true;
    for (size_t i = 2; i + 1 < n.size(); ++i) middle_equal &= n[i] == n[1];
    if (middle_equal) {
      out += flag("--decoder-first-pipeline-num-layers", n.front());
      out += flag("--decoder-last-pipeline-num-layers", n.back());
    } else {
      notes += "\n# stage layer counts ";
      for (size_t i = 0; i < n.size(); ++i) {
        if (i) notes += '/';
        notes += std::to_string(n[i]);
      }
      notes += " are uneven in the middle too; Megatron-LM balances only the first and last";
    }
  } else if (s.pp == 2 && uneven) {
    out += flag("--decoder-first-pipeline-num-layers", n.front());
  }
  if (m.is_moe() && m.num_local_experts % s.ep != 0)
    notes += "\n# ep=" + std::to_string(s.ep) + " does not divide the " +
             std::to_string(m.num_local_experts) +
             " experts: Megatron-Core refuses it (cann-train run spreads them unevenly)";
  if (s.recompute_every > 1)
    notes += "\n# recompute=full:" + std::to_string(s.recompute_every) +
             " is torchtitan's selective layer checkpointing (selective_ac_option " +
             std::to_string(s.recompute_every) +
             "); Megatron-LM's block method above recomputes as many layers of each chunk, "
             "its first ones";
  if (s.zero >= 2)
    notes += "\n# zero=" + std::to_string(s.zero) +
             ": Megatron-LM's distributed optimizer is ZeRO-1; use the DeepSpeed config for "
             "ZeRO-2/3";
  return out + notes;
}

std::string deepspeed_config(const PlanInput& in, const Prediction& p) {
  const model::ModelSpec& m = in.model;
  const Strategy& s = p.strategy;
  nlohmann::ordered_json j;
  j["train_batch_size"] = s.gbs;
  j["train_micro_batch_size_per_gpu"] = s.mbs;
  j["gradient_accumulation_steps"] = s.micro_batches();
  j["bf16"] = {{"enabled", true}};
  j["zero_optimization"] = {{"stage", s.zero},
                            {"overlap_comm", true},
                            {"contiguous_gradients", true},
                            {"reduce_bucket_size", static_cast<long long>(kGradBucketParams)}};
  if (s.recompute != Recompute::kNone)
    j["activation_checkpointing"] = {{"partition_activations", s.sp},
                                     {"contiguous_memory_optimization", true},
                                     {"number_checkpoints", m.num_hidden_layers}};
  j["gradient_clipping"] = 1.0;
  j["steps_per_print"] = 10;
  std::string out = j.dump(2);
  out +=
      "\n# tensor/pipeline/context parallelism come from the model code (Megatron-DeepSpeed: "
      "--tensor-model-parallel-size " +
      std::to_string(s.tp) + " --pipeline-model-parallel-size " + std::to_string(s.pp) +
      (s.cp > 1 ? " --context-parallel-size " + std::to_string(s.cp) : "") + ")";
  if (m.is_moe())
    out +=
        "\n# experts: deepspeed.moe.layer.MoE(num_experts=" + std::to_string(m.num_local_experts) +
        ", ep_size=" + std::to_string(s.ep) + ", k=" + std::to_string(m.num_experts_per_tok) + ")" +
        (m.num_local_experts % s.ep != 0 ? "; DeepSpeed needs ep_size to divide num_experts" : "");
  if (s.recompute == Recompute::kSelective)
    out +=
        "\n# selective recomputation (attention core only) has no DeepSpeed switch: "
        "checkpoint the attention core in the model code";
  if (s.vpp > 1)
    out += "\n# vpp=" + std::to_string(s.vpp) +
           ": DeepSpeed's pipeline engine does not interleave; expect the vpp=1 bubble";
  return out;
}

}  // namespace cann::plan
