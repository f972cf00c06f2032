// What cann-train's own engine trains: one function that holds every rule by which `run`
// refuses a strategy, so the launcher, each worker, `run --strategy auto` and `search
// --engine-only` agree on what runs. The planner prices strategies the engine does not train
// (bf16 clusters, layouts this build has no kernels for); this is where the two part.
//
// The rules, in the order they are checked (each refusal is one line naming the key and the
// fix):
//   the model      vit specs are for planning only, and the blocks must be ones the engine
//                  builds (model/engine_support.h: no MLA, multi-token prediction or
//                  sliding windows yet);
//   the layout     sp needs tp > 1, vpp needs pp > 1, ep with sp or cp is not built, the
//                  processes must be a multiple of tp*pp*cp (and equal dp*tp*pp*cp when dp
//                  is given), ep divides dp, ZeRO 2-3 not under a pipeline, no ZeRO with ep;
//   the model's    tp splits the heads and widths, at most one stage per layer, interleaved
//   shape          chunks divide the layers, no cp with MoE layers, ep at most the experts
//                  (each rank holds ceil(E/ep) slots, some empty; Megatron-Core would ask
//                  that ep divide them), 2*cp divides the sequence, tp
//                  divides a micro-batch's tokens under sp;
//   the reduction  compression and ZeRO need several processes, 1-bit Adam and top-k need
//                  the plain data-parallel layout, ep only the fp32 reduction, ZeRO none;
//   elasticity     on one node a generation refills lost ranks and keeps the layout, so every
//                  layout is elastic there; across nodes (--nnodes MIN:MAX) a generation may
//                  change the world, and each size trains the layout planned for it
//                  (train/elastic_layouts.h), whose dp follows the world.
#pragma once

#include <string>

#include "core/status.h"
#include "model/spec.h"
#include "plan/strategy.h"

namespace cann::plan {

// `run --compress`: how the data-parallel reduction sends gradients.
//   kNone    fp32 all-reduce;
//   kBf16    bf16 on the wire, fp32 accumulation;
//   kOneBit  1-bit Adam: full-gradient warmup, then 1-bit momenta with error feedback;
//   kTopK    the same warmup, then each rank's momentum sent top-k (a topk_ratio share).
struct Compression {
  enum class Kind { kNone, kBf16, kOneBit, kTopK };
  Kind kind = Kind::kNone;
  double topk_ratio = 0.0;
  bool none() const { return kind == Kind::kNone; }
  // 1-bit Adam and top-k: a warmup on full gradients, then compressed momenta.
  bool two_stage() const { return kind == Kind::kOneBit || kind == Kind::kTopK; }
  bool operator==(const Compression&) const = default;
};

// "none", "bf16", "onebit" or "topk:RATIO" with RATIO in (0, 1]; anything else is refused.
StatusOr<Compression> parse_compression(const std::string& text);
// The flag's text: "none", "bf16", "onebit", "topk:0.01".
std::string compression_name(const Compression& c);

// The run around a strategy.
struct EngineShape {
  int world = 0;    // processes started; 0: s.dp * tp * pp * cp
  int seq_len = 0;  // tokens per sequence; 0: the model's seq_length
  Compression compress;
  // --elastic across nodes: a generation may change the world size (one node's generations
  // keep it, and with it the layout), so a dp= given at launch follows each generation's world.
  bool elastic_nodes = false;
};

// Every rule above. `s` as parse_strategy leaves it (dp and mbs 0 when omitted: dp is derived
// from the processes; the micro-batch rule waits for a known mbs) or fully resolved.
Status engine_supports(const Strategy& s, const model::ModelSpec& spec, const EngineShape& shape);

// The data-parallel ranks of `s` over `world` processes: world / (tp * pp * cp).
int engine_data_parallel(const Strategy& s, int world);

}  // namespace cann::plan
