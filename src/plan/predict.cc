// Step-level assembly of a prediction (see predict.h).
#include "plan/predict.h"

#include <algorithm>
#include <cmath>

#include "core/efficiency.h"
#include "model/param_table.h"
#include "plan/comm_model.h"
#include "plan/error_band.h"
#include "plan/gemm_model.h"
#include "plan/partition.h"

namespace cann::plan {
namespace {

double sequence(const PlanInput& in) {
  return in.seq_len > 0 ? in.seq_len : in.model.seq_length;
}

// Gradient and ZeRO traffic of one device per step, exposed part only.
//  zero 0: all-reduce once per step, overlapped with the last micro-batch's backward;
//  zero 1: reduce-scatter there, and an all-gather of the updated bf16 weights overlapped with
//          the next step's first forward (Megatron's distributed optimizer);
//  zero 2: gradients are sharded, so they are reduce-scattered after every micro-batch's
//          backward (DeepSpeed ZeRO-2), plus the weight all-gather;
//  zero 3: weights are gathered before every forward and backward of every micro-batch and
//          gradients reduce-scattered after it (Rajbhandari et al. 2020: 1.5x ZeRO-0 volume per
//          micro-batch).
// A collective overlapped with a window W exposes max(t - W, t_last_bucket): the last bucket
// is only ready when the window ends. The compute it runs beside, min(t, C) of the window's C
// seconds of compute, is slowed by the device's overlap_slowdown; that time is counted here.
// Each collective issued pays its latency (collective_latency_seconds) however small it is:
// gradients go out in buckets of grad_bucket_bytes(dp), one collective each; ZeRO-3 gathers and
// reduces one unit at a time, a unit being a transformer layer (PyTorch FSDP and
// Megatron-Core wrap each block) or the stage's embedding and head, `units` in all.
// The windows are the stage's per-micro-batch forward and backward (`st`), their compute the
// window less the collectives exposed inside it.
double dp_exposed(const PlanInput& in, const Strategy& s, double params, double expert_params,
                  double units, const StageReport& st) {
  const ClusterSpec& c = in.cluster;
  const int D = s.dp * s.cp;
  if (D <= 1) return 0;
  const GroupShape dense_group{D, s.tp};
  const GroupShape expert_group{s.cp, s.tp, s.dp / s.ep, s.tp * s.cp * s.ep};
  const bool fp32 = c.device.precision == Precision::kFp32;
  // Gradients travel at their own precision (fp32 under bf16 training), gathered weights at
  // theirs (bf16).
  const StateBytes sb = state_bytes(c.device.precision, in.bf16_optimizer_state);
  const double bucket =
      fp32 ? in.engine_buckets.size_bytes(params + expert_params) : grad_bucket_bytes(D);
  // `count` collectives share the bytes: the first is priced whole, the others add latency.
  auto coll = [&](Collective k, double p, double pe, double count) {
    const double e = k == Collective::kAllGather ? sb.weights : sb.grads;
    double t = collective_seconds(c, k, e * p, dense_group);
    t += std::max(0.0, count - 1) * collective_latency_seconds(c, k, dense_group);
    if (pe > 0) {
      t += collective_seconds(c, k, e * pe, expert_group);
      t += std::max(0.0, count - 1) * collective_latency_seconds(c, k, expert_group);
    }
    return t;
  };
  const double buckets = std::max(1.0, std::ceil(sb.grads * (params + expert_params) / bucket));
  auto tail = [&](Collective k) {
    const double e = k == Collective::kAllGather ? sb.weights : sb.grads;
    return collective_seconds(c, k, std::min(bucket, e * (params + expert_params)), dense_group);
  };
  const double slowdown = overlap_slowdown(c.device);
  auto hidden_by = [&](double t, bool forward, Collective k) {
    const double window = forward ? st.fwd_s : st.bwd_s;
    const double compute = std::max(0.0, window - (forward ? st.fwd_comm_s : st.bwd_comm_s));
    return std::max(t - window, std::min(t, tail(k))) + slowdown * std::min(t, compute);
  };
  const double m = s.micro_batches();
  const double per_unit = s.zero >= 3 ? std::max(1.0, units) : buckets;
  const double rs = coll(Collective::kReduceScatter, params, expert_params, per_unit);
  const double ag = coll(Collective::kAllGather, params, expert_params, per_unit);
  switch (s.zero) {
    case 0:
      return hidden_by(coll(Collective::kAllReduce, params, expert_params, buckets), false,
                       Collective::kAllReduce);
    case 1:
      return hidden_by(rs, false, Collective::kReduceScatter) +
             hidden_by(ag, true, Collective::kAllGather);
    case 2:
      return m * hidden_by(rs, false, Collective::kReduceScatter) +
             hidden_by(ag, true, Collective::kAllGather);
    default: {
      // Recomputed layers gather their weights again for the recomputation.
      const double regather = s.recompute == Recompute::kFull ? 1 + 1.0 / s.recompute_every : 1;
      return m * (hidden_by(ag, true, Collective::kAllGather) +
                  hidden_by(regather * ag + rs, false, Collective::kReduceScatter));
    }
  }
}

// Parameter tensors of one transformer layer (weights, biases, norm scales) as the model's
// parameter table lists them: the collectives per gathered layer when ZeRO-3 gathers tensor by
// tensor. A GPT layer has 12 (two norms' scale and bias, QKV, output, two MLP matrices, each
// with its bias).
double zero3_tensors_per_unit(const model::ModelSpec& m, int tp) {
  const model::ParamTable table = model::build_param_table(m, tp);
  int n = 0;
  for (const model::TensorInfo& t : table.tensors()) n += t.layer == 0;
  return std::max(1, n);
}

// ZeRO-3 gathering tensor by tensor holds the tensor being used and the one prefetched, not
// whole layers: the largest parameter tensor on a rank (an expert tensor counts all of its
// experts), embeddings included.
double zero3_largest_tensor(const model::ModelSpec& m, int tp) {
  const model::ParamTable table = model::build_param_table(m, tp);
  double largest = 0;
  for (const model::TensorInfo& t : table.tensors())
    largest = std::max(largest, static_cast<double>(t.numel));
  return largest;
}

}  // namespace

double overlap_slowdown(const DeviceSpec& d) {
  if (d.overlap_slowdown >= 0) return d.overlap_slowdown;
  return d.precision == Precision::kFp32 ? 0.0 : kOverlapSlowdown;
}

double reserved_bytes(const DeviceSpec& d) {
  if (d.runtime_reserve_gb >= 0) return d.runtime_reserve_gb * 1073741824.0;
  return d.precision == Precision::kFp32 ? 0.0 : kReservedBytes;
}

StateBytes state_bytes(Precision p, bool bf16_optimizer) {
  if (p == Precision::kFp32) return {4, 4, 8};
  if (bf16_optimizer) return {2, 2, 6};
  if (p == Precision::kFp8) return {2, 4, 8};  // AdamW moments in bf16
  return {2, 4, 12};
}

bool tied_across_stages(const model::ModelSpec& m) {
  return m.architecture != model::Architecture::kVit && m.tie_word_embeddings;
}

StatusOr<PlanInput> make_plan_input(const model::ModelSpec& m, const ClusterSpec& c,
                                    double max_memory_bytes) {
  PlanInput in;
  in.model = m;
  in.cluster = c;
  in.shape = model_shape(m);
  in.memory_limit_bytes = c.device.memory_bytes();
  if (max_memory_bytes > 0)
    in.memory_limit_bytes = std::min(in.memory_limit_bytes, max_memory_bytes);
  return in;
}

StatusOr<Prediction> predict(const PlanInput& in, const Strategy& s, Fidelity f,
                             bool record_events) {
  CANN_RETURN_IF_ERROR(validate_strategy(s, in.model, in.cluster));
  const BlockCosts blocks =
      block_costs(make_cost_context(in.model, in.cluster, in.shape, s, in.seq_len));
  return finish_prediction(in, s, layout_stages(in, s, blocks, f, record_events), f);
}

std::vector<double> stage_layer_costs(const model::ModelSpec& m, const BlockCosts& blocks) {
  const int L = m.num_hidden_layers;
  std::vector<double> cost(L);
  for (int l = 0; l < L; ++l) cost[l] = layer_block(blocks, m, l).total_s();
  cost[0] += blocks.embedding.total_s();
  cost[L - 1] += blocks.head.total_s() + blocks.mtp.total_s();
  return cost;
}

StageLayout layout_stages(const PlanInput& in, const Strategy& s, const BlockCosts& blocks,
                          Fidelity f, bool record_events) {
  const model::ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  const int L = m.num_hidden_layers, p = s.pp, v = s.vpp, V = p * v;
  StageLayout out;

  const std::vector<double> cost = stage_layer_costs(m, blocks);
  // Interleaved chunks are equal in layers (Megatron-LM's schedule requires it); without
  // interleaving the stages are balanced by cost.
  if (v > 1) {
    out.bounds.resize(V + 1);
    for (int k = 0; k <= V; ++k) out.bounds[k] = k * (L / V);
  } else {
    out.bounds = f == Fidelity::kExact ? partition_dp(cost, V) : partition_bisect(cost, V);
  }

  PipelineInput pipe;
  pipe.pp = p;
  pipe.vpp = v;
  pipe.micro_batches = s.micro_batches();
  pipe.chunks.assign(p, std::vector<ChunkCost>(v));
  out.stages.assign(p, StageReport{});
  out.params.assign(p, 0);
  out.expert_params.assign(p, 0);
  out.extra_bytes.assign(p, 0);
  std::vector<double> extra_index(p, 0);  // BlockCost::peak_extra_index_bytes, apart
  out.max_layer_params.assign(p, 0);
  out.work.assign(p, PassCost{});
  out.recompute.assign(p, PassCost{});
  out.scratch_bytes = blocks.scratch_bytes;
  for (int vs = 0; vs < V; ++vs) {
    const int i = vs % p, ch = vs / p;
    ChunkCost& cc = pipe.chunks[i][ch];
    StageReport& st = out.stages[i];
    st.layers.push_back({out.bounds[vs], out.bounds[vs + 1] - 1});
    auto add = [&](const BlockCost& b) {
      cc.fwd_s += b.fwd.total_s();
      cc.bwd_s += b.bwd.total_s() + b.recompute.total_s();
      cc.activation_bytes += b.activation_bytes;
      out.params[i] += b.params;
      out.expert_params[i] += b.expert_params;
      out.extra_bytes[i] = std::max(out.extra_bytes[i], b.peak_extra_bytes);
      extra_index[i] = std::max(extra_index[i], b.peak_extra_index_bytes);
      out.max_layer_params[i] = std::max(out.max_layer_params[i], b.params + b.expert_params);
      out.work[i] += b.fwd;
      out.work[i] += b.bwd;
      out.recompute[i] += b.recompute;
    };
    for (int l = out.bounds[vs]; l < out.bounds[vs + 1]; ++l) {
      if (l == 0) {
        add(blocks.embedding);
        st.embedding = true;
      }
      add(layer_block(blocks, m, l));
      if (l == L - 1) {
        add(blocks.head);
        st.head = true;
        // DeepSeek's multi-token prediction modules sit beside the head they share.
        if (m.num_nextn_predict_layers > 0) add(blocks.mtp);
        // A tied head's weight is the token embedding. With pp > 1 the last stage keeps its
        // own copy (Megatron keeps the two in sync with an all-reduce of their gradients).
        if (p > 1 && tied_across_stages(m))
          out.params[i] += static_cast<double>(m.vocab_size) * m.hidden_size / s.tp;
      }
    }
    st.fwd_s += cc.fwd_s;
    st.bwd_s += cc.bwd_s;
  }
  for (int i = 0; i < p; ++i) out.extra_bytes[i] += extra_index[i];
  for (int l = 0; l < L; ++l) {
    // Which device runs layer l: the one whose chunk holds it.
    const int vs = static_cast<int>(std::upper_bound(out.bounds.begin(), out.bounds.end(), l) -
                                    out.bounds.begin()) -
                   1;
    StageReport& st = out.stages[vs % p];
    const BlockCost& b = layer_block(blocks, m, l);
    st.fwd_comm_s += b.fwd.comm_s() + (l == 0 ? blocks.embedding.fwd.comm_s() : 0) +
                     (l == L - 1 ? blocks.head.fwd.comm_s() + blocks.mtp.fwd.comm_s() : 0);
    st.bwd_comm_s +=
        b.bwd.comm_s() + b.recompute.comm_s() + (l == 0 ? blocks.embedding.bwd.comm_s() : 0) +
        (l == L - 1
             ? blocks.head.bwd.comm_s() + blocks.mtp.bwd.comm_s() + blocks.mtp.recompute.comm_s()
             : 0);
  }

  // A stage boundary message is one micro-batch's activation, split over the tensor group
  // (Megatron's scatter-gather), crossing nodes once the pipeline spans nodes.
  const double act_msg = static_cast<double>(s.mbs) * sequence(in) / s.cp * m.hidden_size *
                         element_bytes(c.device.precision) / s.tp;
  const long long stage_stride = static_cast<long long>(s.tp) * s.cp * s.dp;
  out.p2p_message_s = p > 1 ? p2p_seconds(c, act_msg, stage_stride * p > c.devices_per_node) : 0;
  pipe.p2p_s = out.p2p_message_s;
  out.pipeline =
      f == Fidelity::kExact ? simulate_pipeline(pipe, record_events) : estimate_pipeline(pipe);
  // The fp32 engine keeps each (micro-batch, chunk) in flight in a slot of its own, every slot
  // sized for the device's largest chunk and each with its own input buffer and token ids
  // (Model::layout_activations): slots x that, not the sum of what is in flight at once. The
  // slots are the schedule's most pairs in flight (parallel/pipeline_schedule.h): min(p-i, m)
  // without interleaving, the warm-up (p-i-1)*2 + (v-1)*p plus one with it.
  if (c.device.precision == Precision::kFp32 && m.architecture != model::Architecture::kVit) {
    const int mb = s.micro_batches();
    for (int i = 0; i < p; ++i) {
      double largest = 0;
      for (int ch = 0; ch < v; ++ch) {
        const bool embeds = out.bounds[ch * p + i] == 0;
        largest = std::max(largest, pipe.chunks[i][ch].activation_bytes +
                                        (embeds ? 0 : blocks.embedding.activation_bytes));
      }
      const int slots =
          v == 1 ? std::min(p - i, mb) : std::min(mb * v, (p - i - 1) * 2 + (v - 1) * p + 1);
      out.pipeline.peak_activation_bytes[i] = std::max(1, slots) * largest;
    }
  }
  return out;
}

namespace {

struct Shards {
  double w, g, o, we, ge, oe;  // divisors of weights, grads, optimizer state (dense, expert)
};

Shards shards(const Strategy& s) {
  const double D = s.dp * s.cp, De = static_cast<double>(s.dp) * s.cp / s.ep;
  return {s.zero >= 3 ? D : 1,  s.zero >= 2 ? D : 1,  s.zero >= 1 ? D : 1,
          s.zero >= 3 ? De : 1, s.zero >= 2 ? De : 1, s.zero >= 1 ? De : 1};
}

// The fp32 engine's state on stage i (engine_memory.h): its flat buffers of P + Pe floats,
// whose ZeRO shard is the rank's piece of every gradient bucket. Expert floats form buckets of
// their own when they shard over a smaller group (ep > 1).
void engine_state(const PlanInput& in, const Strategy& s, double P, double Pe, StageReport* st) {
  const int D = s.dp * s.cp, De = D / s.ep;
  const EngineBuckets& b = in.engine_buckets;
  const double all = P + Pe;
  double shard = 0, staging = 0;
  if (s.ep == 1) {
    shard = engine_shard_floats(all, D, b);
    staging = engine_staging_floats(all, D, b);
  } else {
    shard = engine_shard_floats(P, D, b) + engine_shard_floats(Pe, De, b);
    staging = std::max(engine_staging_floats(P, D, b), engine_staging_floats(Pe, De, b));
  }
  const double piece = staging / D;  // the largest bucket's padded piece
  if (s.zero <= 1) {
    st->weights_bytes = 4 * all;
    st->grad_shard_bytes = s.zero == 1 ? 4 * shard : 0;
    st->grads_bytes = 4 * all + st->grad_shard_bytes;
    st->optimizer_bytes = 8 * (s.zero == 1 ? shard : all);
    // ZeRO-1: the padded bucket sent to the reduce-scatter and the one the all-gather fills.
    st->transient_bytes = s.zero == 1 ? 2 * 4 * staging : 0;
    return;
  }
  if (s.zero == 2) {
    // Gradients: the shard, plus the bucket backward fills and one waiting for its
    // reduce-scatter (the engine holds backward back beyond that and releases reduced buckets).
    st->weights_bytes = 4 * all;
    st->grads_bytes = 4 * (shard + engine_two_largest_buckets_floats(all, b));
    st->optimizer_bytes = 8 * shard;
    // Reduce-scatter input and output, and the parameter all-gather's staging.
    st->transient_bytes = 4 * (2 * staging + piece);
    return;
  }
  // ZeRO-3: buckets are whole layers. The shard is the rank's piece of every layer; in memory
  // are the layers outside the blocks (embeddings, final norm) and at most two blocks, and
  // the gradients of the shard plus two layers.
  const EngineParams ep = engine_params(in.model, s.tp, s.ep);
  const int L = in.model.num_hidden_layers;
  std::vector<double> layers = {ep.embedding, ep.head};
  double first = 0, second = 0;
  for (int l = 0; l < L; ++l) {
    const double n = in.model.is_moe_layer(l) ? ep.moe_layer + ep.moe_experts : ep.dense_layer;
    layers.push_back(n);
    if (n > first) {
      second = first;
      first = n;
    } else if (n > second) {
      second = n;
    }
  }
  // A pipeline stage holds a share of the blocks; scale the whole-model figures to it.
  double total = 0, shard3 = 0, largest = 0;
  for (double n : layers) {
    total += n;
    shard3 += std::ceil(n / D);
    largest = std::max(largest, n);
  }
  const double share = total > 0 ? all / total : 1.0;
  shard3 *= share;
  double top[2] = {0, 0};  // the two largest layers, embeddings and final norm included
  for (double n : layers) {
    if (n > top[0]) {
      top[1] = top[0];
      top[0] = n;
    } else if (n > top[1]) {
      top[1] = n;
    }
  }
  st->weights_bytes = 4 * (shard3 + std::min(all, ep.embedding + ep.head + first + second));
  st->grads_bytes = 4 * (shard3 + std::min(all, top[0] + top[1]));
  st->optimizer_bytes = 8 * shard3;
  // Reduce-scatter input (one padded layer) and output.
  const double layer_piece = std::ceil(largest / D);
  st->transient_bytes = 4 * (D * layer_piece + layer_piece);
}

// The engine maps each buffer of kMappedBytes (4 MiB) or more on a 2 MiB boundary, rounded up
// to whole 2 MiB pages, and advises huge pages for it (core/aligned_buffer.h, core/pages.cc):
// every page a huge one, so a buffer touched throughout is resident to its last whole page.
// The buffers: the parameters, the gradients, each AdamW moment and the activation arena; a
// figure that is several buffers (ZeRO-2/3 gradients, ZeRO-1's shard beside the gradients) is
// rounded as one, which leaves out at most 2 MiB per extra buffer.
double huge_page_slack_bytes(const StageReport& st) {
  constexpr double kPage = 2.0 * 1048576, kMapped = 4.0 * 1048576;
  auto slack = [&](double bytes) {
    return bytes >= kMapped ? std::ceil(bytes / kPage) * kPage - bytes : 0.0;
  };
  return slack(st.weights_bytes) + slack(st.grads_bytes) + 2 * slack(st.optimizer_bytes / 2) +
         slack(st.activation_bytes);
}

// Fills the memory fields of stage i; returns its total.
double stage_memory(const PlanInput& in, const Strategy& s, const StageLayout& lay, int i,
                    StageReport* st) {
  const Precision prec = in.cluster.device.precision;
  const Shards sh = shards(s);
  const double P = lay.params[i], Pe = lay.expert_params[i];
  st->activation_bytes = lay.pipeline.peak_activation_bytes[i];
  // Working set beyond stored activations: the recomputed layer's tensors, and under ZeRO-3
  // the gathered weights of the current and the prefetched layer (or tensor, where ZeRO-3
  // gathers tensor by tensor). (The fp32 engine's gathered layers are in engine_state's
  // weights.)
  double gathered = 0;
  if (s.zero >= 3 && prec != Precision::kFp32)
    gathered = 2 * element_bytes(prec) *
               (in.zero3_per_tensor
                    ? std::min(lay.max_layer_params[i], zero3_largest_tensor(in.model, s.tp))
                    : lay.max_layer_params[i]);
  if (prec == Precision::kFp32) {
    engine_state(in, s, P, Pe, st);
    st->scratch_bytes = lay.scratch_bytes;
    st->transient_bytes += lay.extra_bytes[i] + gathered + lay.scratch_bytes;
  } else {
    const StateBytes b = state_bytes(prec, in.bf16_optimizer_state);
    st->weights_bytes = b.weights * (P / sh.w + Pe / sh.we);
    st->grads_bytes = b.grads * (P / sh.g + Pe / sh.ge);
    st->optimizer_bytes = b.optimizer * (P / sh.o + Pe / sh.oe);
    st->transient_bytes = lay.extra_bytes[i] + gathered;
  }
  if (prec == Precision::kFp32 && in.cluster.device.huge_pages)
    st->page_slack_bytes = huge_page_slack_bytes(*st);
  st->reserved_bytes = reserved_bytes(in.cluster.device);
  st->total_bytes = st->weights_bytes + st->grads_bytes + st->optimizer_bytes +
                    st->activation_bytes + st->transient_bytes + st->reserved_bytes;
  return st->total_bytes;
}

}  // namespace

double memory_peak(const PlanInput& in, const Strategy& s, const StageLayout& layout) {
  double peak = 0;
  for (int i = 0; i < s.pp; ++i) {
    StageReport st;
    peak = std::max(peak, stage_memory(in, s, layout, i, &st));
  }
  return peak;
}

Prediction finish_prediction(const PlanInput& in, const Strategy& s, const StageLayout& lay,
                             Fidelity f) {
  const model::ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  const DeviceSpec& dev = c.device;
  const int p = s.pp, mb = s.micro_batches();
  const long long stage_stride = static_cast<long long>(s.tp) * s.cp * s.dp;
  Prediction out;
  out.strategy = s;
  out.memory_limit_bytes = in.memory_limit_bytes;
  out.stages = lay.stages;
  out.pipeline = lay.pipeline;
  out.p2p_message_s = lay.p2p_message_s;
  const PipelineResult& pr = lay.pipeline;
  const Shards sh = shards(s);

  double step = 0;
  std::vector<double> tail(p, 0);
  for (int i = 0; i < p; ++i) {
    StageReport& st = out.stages[i];
    const double P = lay.params[i], Pe = lay.expert_params[i];
    double units = st.embedding + st.head;
    for (const auto& [first, last] : st.layers) units += last - first + 1;
    if (s.zero >= 3 && in.zero3_per_tensor) units *= zero3_tensors_per_unit(m, s.tp);
    st.dp_comm_s = dp_exposed(in, s, P, Pe, units, st);
    // Tied embedding and head on different stages: their gradients are summed between the
    // first and the last stage after the backward pass (Megatron), exposed.
    if (p > 1 && tied_across_stages(m) && (i == 0 || i == p - 1))
      st.dp_comm_s += collective_seconds(c, Collective::kAllReduce,
                                         state_bytes(dev.precision, in.bf16_optimizer_state).grads *
                                             m.vocab_size * m.hidden_size / s.tp,
                                         GroupShape{2, static_cast<int>(stage_stride * (p - 1))});
    // The optimizer step streams 38 bytes per parameter it owns: the gradient-norm pass reads
    // the fp32 gradient (4); AdamW reads gradient, master weight, m and v (16) and writes
    // master, m, v and the bf16 weight (14); zeroing the gradient writes it (4). The fp32
    // engine streams 36: the norm pass reads the gradient (4), AdamW reads gradient, weight, m
    // and v (16) and writes weight, m and v (12), zeroing writes the gradient (4).
    // Under fp8 (bf16 moments): 4 + 12 read + 10 written + 4 = 30. With the whole optimizer
    // state in bf16 (bf16 gradient, master copy and moments): 2 + 8 read + 8 written + 2 = 20.
    const double opt_bytes = dev.precision == Precision::kFp32  ? 36
                             : in.bf16_optimizer_state          ? 20
                             : dev.precision == Precision::kFp8 ? 30
                                                                : 38;
    st.optimizer_s = stream_seconds(dev, opt_bytes * (P / sh.o + Pe / sh.oe));
    stage_memory(in, s, lay, i, &st);
    tail[i] = st.dp_comm_s + st.optimizer_s;
    const double end = f == Fidelity::kExact ? pr.device_end_s[i] : pr.makespan_s;
    step = std::max(step, end + tail[i]);
    out.memory_peak_bytes = std::max(out.memory_peak_bytes, st.total_bytes);
  }
  out.step_time_s = step;
  const StepBand band = step_band(step, error_band(layout_kind(s, m)));
  out.step_time_s_low = band.low_s;
  out.step_time_s_high = band.high_s;
  out.fits = out.memory_peak_bytes <= in.memory_limit_bytes;

  // Where the bottleneck device's time goes: the device with the most work per step.
  int b = 0;
  for (int i = 1; i < p; ++i)
    if (pr.busy_s[i] + pr.p2p_s[i] + tail[i] > pr.busy_s[b] + pr.p2p_s[b] + tail[b]) b = i;
  out.bottleneck_stage = b;
  TimeBreakdown& t = out.time;
  t.gemm_s = mb * lay.work[b].gemm_s;
  t.stream_s = mb * lay.work[b].stream_s;
  t.tp_comm_s = mb * lay.work[b].tp_comm_s;
  t.ep_comm_s = mb * lay.work[b].ep_comm_s;
  t.cp_comm_s = mb * lay.work[b].cp_comm_s;
  t.recompute_s = mb * lay.recompute[b].total_s();
  t.p2p_s = pr.p2p_s[b];
  t.dp_comm_s = out.stages[b].dp_comm_s;
  t.optimizer_s = out.stages[b].optimizer_s;
  t.bubble_s = std::max(
      0.0, out.step_time_s - (t.gemm_s + t.stream_s + t.recompute_s + t.comm_s() + t.optimizer_s));

  // Headline numbers.
  const double tokens = static_cast<double>(s.gbs) * sequence(in);
  const int n = c.num_devices();
  out.tokens_per_s = tokens / out.step_time_s;
  out.model_tflops_per_device = in.shape.flops_per_token * tokens / (n * out.step_time_s) / 1e12;
  out.mfu = out.model_tflops_per_device / dev.mfu_peak_tflops();
  double hw_flops = 0;
  for (int i = 0; i < p; ++i) hw_flops += mb * (lay.work[i].flops + lay.recompute[i].flops);
  out.hfu = hw_flops / p / (out.step_time_s * dev.mfu_peak_tflops() * 1e12);
  out.bubble_ratio = pr.bubble_ratio;
  out.comm_ratio = t.comm_s() / out.step_time_s;
  const double non_comm = out.step_time_s - t.comm_s();
  out.scaling_efficiency = non_comm > 0 ? (t.gemm_s + t.stream_s) / non_comm : 0;

  // Failures. A checkpoint holds the fp32 master weights and Adam moments (12 bytes per
  // parameter; the fp32 engine's weights, m and v are 12 too); each copy is written once.
  // With ZeRO every rank owns a distinct shard and writes it. Without, the data-parallel
  // (and context-parallel) replicas hold copies and only replica 0 writes the dense state,
  // while expert state, split over the ep ranks of each expert group, is written by the
  // first expert group. The node holding rank 0 writes the most: its tp ranks x cp ranks x
  // dp ranks are the first ones of the layout.
  const int dpn = c.devices_per_node;
  const int n_tp = std::min(s.tp, dpn);
  const int n_cp = std::min(s.cp, std::max(1, dpn / s.tp));
  const int n_dp = std::min(s.dp, std::max(1, dpn / (s.tp * s.cp)));
  double dense_shard = 0, expert_shard = 0;  // optimizer bytes per rank, largest stage
  for (int i = 0; i < p; ++i) {
    dense_shard = std::max(dense_shard, 12 * lay.params[i]);
    expert_shard = std::max(expert_shard, 12 * lay.expert_params[i]);
  }
  double node_bytes = 0;
  if (s.zero >= 1) {
    node_bytes = n_tp * n_cp * n_dp * (dense_shard / sh.o + expert_shard / sh.oe);
  } else {
    node_bytes = n_tp * (dense_shard + std::min(n_dp, s.ep) * expert_shard);
  }
  GoodputInput gi;
  gi.devices = n;
  gi.device_mtbf_hours = c.reliability.device_mtbf_hours;
  gi.checkpoint_bytes_per_node = node_bytes;
  gi.storage_GBps_per_node = c.reliability.checkpoint_write_GBps_per_node;
  gi.restart_s = c.reliability.restart_s;
  gi.step_time_s = out.step_time_s;
  out.goodput = goodput(gi);
  out.tei = training_efficiency_index(out.scaling_efficiency, out.comm_ratio, out.goodput.ratio);
  out.energy_kwh_per_step = energy_kwh_per_step(n, dev.tdp_watts, out.step_time_s);
  out.cost_usd_per_day = n * dev.hourly_cost_usd * 24;
  return out;
}

}  // namespace cann::plan
