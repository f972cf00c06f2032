// Cost of one building block (a dense layer, an MoE layer, the embedding, the head, DeepSeek's
// multi-token prediction module) for one micro-batch on one device under a strategy: time of
// its forward, backward and recomputation passes split into GEMM, memory-bound and
// communication parts; FLOPs executed; parameters held; activation bytes stored for the
// backward pass.
//
// Each pass is a straight list of the kernels a Megatron-style trainer runs (Korthikanti et
// al. 2022, section 4), for the block the spec describes: LayerNorm or RMSNorm; multi-head
// attention with grouped KV heads and rotary embedding, or multi-head latent attention; an
// attention core that keeps its scores in memory or a fused (FlashAttention) one, as the
// cluster's device says; a GeLU or SwiGLU MLP, or an MoE block with routed, shared and
// fine-grained experts; residual adds with or without dropout; the tensor-parallel
// collectives between them (layer_cost_attention.cc, layer_cost_mlp.cc). GEMMs go through
// gemm_seconds (efficiency by shape), elementwise kernels through elementwise_seconds with the
// bytes they read and write, collectives through collective_seconds. Tensor-parallel and
// expert all-to-all communication is exposed (Megatron 2022 runs it on the compute stream);
// context-parallel gathers are exposed too (see layer_cost_attention.cc).
#pragma once

#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/model_shape.h"
#include "plan/strategy.h"

namespace cann::plan {

// One pass (forward, backward or recomputation) of one block for one micro-batch.
struct PassCost {
  double gemm_s = 0;     // GEMMs (including attention's batched GEMMs)
  double stream_s = 0;   // memory-bound kernels
  double tp_comm_s = 0;  // tensor-parallel all-reduce / all-gather / reduce-scatter
  double ep_comm_s = 0;  // expert all-to-all, dispatch and combine
  double cp_comm_s = 0;  // exposed part of the context-parallel ring
  double flops = 0;      // FLOPs executed by the GEMMs
  double compute_s() const { return gemm_s + stream_s; }
  double comm_s() const { return tp_comm_s + ep_comm_s + cp_comm_s; }
  double total_s() const { return compute_s() + comm_s(); }
  PassCost& operator+=(const PassCost& o);
};

struct BlockCost {
  PassCost fwd, bwd, recompute;
  double params = 0;            // non-expert parameters on one device
  double expert_params = 0;     // expert parameters on one device
  double activation_bytes = 0;  // kept from forward to backward, per micro-batch
  double peak_extra_bytes = 0;  // working set while its backward runs (recomputed tensors)
  // fp32 engine, full recomputation: the part of peak_extra_bytes in the engine's int arena
  // (MoE routing). The engine lays the recomputed dense and MoE float sets over each other but
  // keeps ints apart, so a stage needs the largest float part plus the largest int part.
  double peak_extra_index_bytes = 0;
  double total_s() const { return fwd.total_s() + bwd.total_s() + recompute.total_s(); }
};

// Everything the block costs depend on: the model, the cluster, and the strategy's sizes.
struct CostContext {
  const model::ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  ModelShape shape;
  Strategy strategy;
  // Process groups in the rank layout (strategy.h): tp fastest, then cp, dp, pp.
  GroupShape tp_group, cp_group, ep_group;
  int seq_len = 0;  // tokens per sequence; 0: the model's seq_length
  // Whether the blocks are cann-train's own fp32 engine's (an fp32 device and a spec the
  // engine builds): then parameters and activations are its buffers (engine_memory.h).
  bool engine = false;
  // Parameters one device holds of a dense and of an MoE layer (model_shape.h).
  LayerParams dense_params, moe_params;
  // The device as the linear layers' GEMMs see it: at its fp8 peak under fp8 precision.
  DeviceSpec linear_device;
};

CostContext make_cost_context(const model::ModelSpec& m, const ClusterSpec& c,
                              const ModelShape& shape, const Strategy& s, int seq_len = 0);

struct BlockCosts {
  BlockCost dense, moe, embedding, head;
  // Layers attending through the spec's sliding window (model::ModelSpec::window), dense and MoE.
  BlockCost dense_window, moe_window;
  // DeepSeek's multi-token prediction modules, all of them, on the last pipeline stage.
  BlockCost mtp;
  // recompute=full:k: the layers between every k-th, which keep all they save (the four
  // blocks above without recomputation); 1: every layer is priced as above.
  int recompute_every = 1;
  BlockCost dense_kept, moe_kept, dense_window_kept, moe_window_kept;
  // fp32 engine only: the backward scratch every device holds once, whatever its layers.
  double scratch_bytes = 0;
};

// Under an fp32 device (cluster.h) the parameters are the engine's padded flat-buffer floats
// and the activations its arena (engine_memory.h) for every spec it builds; element sizes in
// the traffic and streaming bytes are 4 instead of 2.
//
// The four block costs for the context's strategy. Only tp, cp, ep, sp, mbs and recompute
// matter here; dp, pp, zero, vpp and gbs act at the step level (predict.h), which also adds
// the last stage's copy of a tied head's weight when pp > 1.
BlockCosts block_costs(const CostContext& ctx);

// The block of layer l: dense or MoE, full attention or windowed, recomputed or not.
const BlockCost& layer_block(const BlockCosts& b, const model::ModelSpec& m, int l);

}  // namespace cann::plan
