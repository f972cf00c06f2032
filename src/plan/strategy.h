// Strategy: one way to split a training job over a cluster, and its string form, used by the
// CLI, reports, logs and checkpoints (DESIGN.md, "Strategy string"):
//
//   dp=8,tp=4,pp=2,ep=1,cp=1,sp=off,mbs=1,gbs=512,zero=1,recompute=selective,vpp=1
//
// Ranks are laid out as Megatron-LM does, tensor-parallel fastest, then context, then data
// (whose ranks also form the expert groups), then pipeline: rank = tp_rank + tp * (cp_rank +
// cp * (dp_rank + dp * pp_rank)). Which groups stay inside a node follows from that order.
#pragma once

#include <string>

#include "core/status.h"
#include "model/recompute.h"
#include "model/spec.h"
#include "plan/cluster.h"

namespace cann::plan {

// The engine's recomputation modes (model/recompute.h) are the planner's: one enum, priced
// here and trained there.
using Recompute = model::Recompute;

struct Strategy {
  int dp = 1;       // data-parallel replicas
  int tp = 1;       // tensor (Megatron) parallel, within a node unless the cluster allows
  int pp = 1;       // pipeline stages
  int ep = 1;       // expert-parallel group, carved out of the data-parallel ranks: ep divides dp
  int cp = 1;       // context parallel: the sequence split over cp ranks, ring attention
  bool sp = false;  // sequence parallel inside the tensor group (Korthikanti et al. 2022)
  int mbs = 1;      // micro-batch, sequences per data-parallel rank per pipeline step
  int gbs = 0;      // global batch, sequences per optimizer step
  int zero = 0;     // ZeRO stage 0-3 over the data-parallel (times context-parallel) group
  Recompute recompute = Recompute::kNone;
  // Full recomputation of every k-th layer only (layers k-1, 2k-1, ...: torchtitan's selective
  // layer checkpointing, selective_ac_option k); 1: every layer. "recompute=full:k".
  int recompute_every = 1;
  int vpp = 1;  // model chunks per pipeline stage (interleaved 1F1B when > 1)

  int devices() const { return dp * tp * pp * cp; }
  // Any split of the model itself (the data-parallel ranks then hold different tensors).
  bool model_parallel() const { return tp > 1 || pp > 1 || ep > 1 || cp > 1; }
  // Micro-batches per step on each pipeline: gbs / (dp * mbs).
  int micro_batches() const { return gbs / (dp * mbs); }
  bool operator==(const Strategy&) const = default;
};

// The canonical string: every key, in the order above.
std::string strategy_string(const Strategy& s);
// The keys that differ from what parse_strategy gives an empty string, in the same order:
// "tp=2,sp=on" for parse_strategy("sp=on,tp=2"); "dp" when none does. For messages and logs.
std::string strategy_brief(const Strategy& s);
std::string_view recompute_name(Recompute r);
// The recompute key's value: recompute_name, or "full:k" for every k-th layer.
std::string recompute_text(const Strategy& s);

// Syntax only: keys, values and duplicates. Omitted keys take their defaults; `dp`, `mbs` and
// `gbs` left out are marked 0 and filled in by resolve_strategy (mbs 1). The trainer reads an
// omitted mbs its own way: no gradient accumulation without pipeline parallelism.
StatusOr<Strategy> parse_strategy(const std::string& text);

// Fills dp (devices / (tp*pp*cp)) and gbs (`default_gbs`, or dp*mbs when that is 0) where the
// string left them out, then checks the strategy against the model and the cluster. Every
// message says exactly which numbers disagree, e.g. "dp*tp*pp*cp = 8*4*2*1 = 64, but the
// cluster has 1024 devices".
StatusOr<Strategy> resolve_strategy(Strategy s, const model::ModelSpec& m, const ClusterSpec& c,
                                    int default_gbs);
Status validate_strategy(const Strategy& s, const model::ModelSpec& m, const ClusterSpec& c);

}  // namespace cann::plan
