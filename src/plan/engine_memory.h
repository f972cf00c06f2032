// Engine memory: what cann-train's own fp32 engine allocates on each rank, predicted from the
// model spec and the strategy alone, so a run can print the planner's figure beside its own
// accounting. The planner uses the same pieces for every strategy on a cluster whose device
// precision is fp32 (cluster.h), so `search` and `simulate` print the same numbers.
//
// The engine keeps, per rank (DESIGN.md, "Memory layout: flat buffers"):
//   parameters     4 bytes per float of the flat buffer, tensors aligned to 16 floats
//                  (ParamTable::kAlign); sharded only at ZeRO-3
//   gradients      the same layout; sharded at ZeRO >= 2
//   optimizer      AdamW's m and v, 8 bytes per float, no master copy; sharded at ZeRO >= 1
//   gradient_shard ZeRO-1 only: the averaged gradients reduce-scattered out of place into a
//                  shard buffer (parallel/zero.h), 4 bytes per shard float
//   activations    the arena Model::layout_activations() carves for micro_batch x seq_len:
//                  the tensors forward saves plus the backward scratch, each rounded up to 16
//                  floats, and the int buffers (token ids, MoE routing) beside it
//   staging        ZeRO >= 1: two buffers of one padded bucket, the reduce-scatter input and
//                  the all-gather output (parallel/zero.cc)
// A ZeRO shard is the rank's piece of every gradient bucket, each bucket cut into D pieces of
// ceil(n/D) floats: for buckets of 10 and 7 floats over D = 4, 3 + 2 = 5 shard floats.
#pragma once

#include <utility>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "plan/buckets.h"
#include "plan/cluster.h"
#include "plan/strategy.h"

namespace cann::plan {

// Bytes per rank; total is their sum. With pp > 1, the stage that needs the most.
struct EngineMemory {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double gradient_shard = 0;
  double activations = 0;  // the arena, with the micro-batches a pipeline stage holds at once
  double staging = 0;      // communication staging, the ZeRO-3 gathered weights, recomputed tensors
  double total = 0;
};

// The engine's memory per rank for `s` (its mbs replaced by micro_batch; gbs 0 means one
// micro-batch per step) at sequence length seq_len (at most the model's seq_length). s.dp must
// be set (parse_strategy leaves an omitted dp at 0). Errors: a strategy the engine does not
// run (engine_supports over dp*tp*pp*cp processes), or sizes that are not positive. The
// figures are the fp32 planner's for the same strategy (`cann-train simulate` on an fp32
// cluster).
// expert_replicas: `run --expert-rebalance ...,replicas=R`, whose room for R copies of experts
// per MoE layer (model/moe_layer.h, MoeShadows) counts with the activations.
StatusOr<EngineMemory> predict_engine_memory(const model::ModelSpec& m, const Strategy& s,
                                             int micro_batch, int seq_len,
                                             const EngineBuckets& buckets = {},
                                             int expert_replicas = 0);

// The room the engine keeps for `replicas` copies of experts in each MoE layer of a rank's
// stage over ep ranks: per MoE layer the copies' weights; per activation slot (`slots`, the
// micro-batches in flight) the saved rows (xe, he, ge, ye at capacity) of the chunk with the
// most MoE layers (a slot holds one chunk at a time); and once the copies' gradients, the rows'
// backward scratch and the weights' and gradients' exchange staging (ep blocks each way).
// `chunks`: the stage's [first, last] layers per chunk (one chunk of every layer without a
// pipeline).
double engine_expert_copies_bytes(const model::ModelSpec& m, int batch, int seq, int cp, int ep,
                                  int replicas, const std::vector<std::pair<int, int>>& chunks,
                                  int slots);

// The cluster the engine's figures are priced on: `devices` fp32 devices on one node. Its
// speeds shape only the pipeline partition's balance, not the memory of a given partition.
ClusterSpec engine_cluster(int devices);

// The engine's pipeline stages for `s` (s.pp stages, s.mbs sequences of seq_len per
// micro-batch; without interleaving): pp + 1 layer boundaries, the planner's exact partition
// of stage_layer_costs on engine_cluster, so the stages a run trains are those
// predict_engine_memory prices.
std::vector<int> engine_stage_bounds(const model::ModelSpec& m, const Strategy& s, int seq_len);

// Slots per expert, ceil(capacity_factor * N * K / E) and at least 1: the engine's formula
// (kernels/cpu/moe.h); a test keeps the two equal.
int engine_moe_capacity(int N, int E, int K, double capacity_factor);

// The activation arena in floats (its int buffers counted as floats: both are 4 bytes), split
// by block. Under tensor parallelism (tp) heads, QKV, MLP widths and the vocabulary divide by
// tp (expert widths do not: the engine keeps experts whole on every tensor-parallel rank), and
// the tp buffers (loss partials, gathered input) are added; under ep the all-to-all buffers; with
// sequence parallelism (sp) the layernorm and residual tensors hold 1/tp of the tokens; cp ranks
// each hold seq/cp queries. With tp = cp = 1 this is exactly the engine's layout, whose total is
// embedding + dense/MoE layers + head + scratch.
struct EngineArena {
  double embedding = 0;        // encoded input, token ids and targets
  double dense_layer = 0;      // one dense layer's saved tensors
  double moe_layer = 0;        // one MoE layer's saved tensors (floats and routing ints)
  double attention_lse = 0;  // B*H*T of one layer (the log-sum-exp): what selective drops
  double layer_output = 0;     // one layer's output: all full recomputation keeps
  double expert_counts = 0;    // E ints (2E under ep): full recomputation keeps them too
  double moe_routing = 0;      // the int buffers of moe_layer (expert index, slot, counts)
  double head = 0;             // final layernorm, logits, per-token losses
  double scratch = 0;          // backward scratch, one set for all layers
  double total(const model::ModelSpec& m) const;
};
EngineArena engine_arena(const model::ModelSpec& m, int batch, int seq, int tp = 1, bool sp = false,
                         int cp = 1, int ep = 1);

// Floats of the flat parameter buffer per block on one rank, each tensor padded to 16 floats
// as ParamTable lays it out (the last tensor, the final norm's bias, is not padded). Split
// tensors hold 1/tp of their rows or columns; expert tensors 1/ep of the experts. With
// tp = ep = 1 the blocks add up to ParamTable::total_floats().
struct EngineParams {
  double embedding = 0;  // token and position tables
  double dense_layer = 0;
  double moe_layer = 0;    // attention, norms and router of an MoE layer
  double moe_experts = 0;  // the experts of an MoE layer held on this rank
  double head = 0;         // final layernorm (the output head is the tied token table)
};
EngineParams engine_params(const model::ModelSpec& m, int tp = 1, int ep = 1);

// Floats of one rank's ZeRO shard of a flat buffer of `floats` over D ranks, and floats of the
// largest bucket padded to D pieces (one staging buffer).
double engine_shard_floats(double floats, int D, const EngineBuckets& b);
double engine_staging_floats(double floats, int D, const EngineBuckets& b);
// Floats of the two largest buckets of a flat buffer of `floats` together, unpadded: the
// gradients ZeRO-2 holds beyond its shard (the bucket backward fills and one waiting).
double engine_two_largest_buckets_floats(double floats, const EngineBuckets& b);

}  // namespace cann::plan
