// The engine's refusal rules (see engine_support.h). Messages keep the wording `run` has always
// printed, so a refused launch reads the same whichever caller found it.
#include "plan/engine_support.h"

#include <cstdio>
#include <cstdlib>

#include "model/engine_support.h"
#include "model/param_table.h"

namespace cann::plan {
namespace {

// The layout alone: the strategy against the processes started.
// "--strategy tp=2,sp=on: ", the prefix of a refusal (built only for one: the search asks
// about many strategies).
std::string where(const Strategy& s) {
  return "--strategy " + strategy_brief(s) + ": ";
}

Status check_layout(const Strategy& s, int world) {
  auto refuse = [&](const std::string& what) { return InvalidArgument(where(s) + what); };
  if (s.recompute_every > 1)
    return refuse("recompute=full:" + std::to_string(s.recompute_every) +
                  " (every k-th layer, torchtitan's selective layer checkpointing) is a mode the "
                  "planner prices for other engines; this one recomputes every layer or none; "
                  "hint: use recompute=full or selective");
  if (s.recompute == Recompute::kOp)
    return refuse(
        "recompute=op (torchtitan's per-operator policy) is a mode the planner prices "
        "for other engines; this one recomputes none, selective or full; hint: use "
        "recompute=selective or full");
  // Under sp each tensor-parallel rank would route its own slice of the tokens, so the ranks
  // of a tensor group would exchange different rows with their expert peers: not built yet.
  if (s.ep > 1 && s.sp)
    return refuse("expert parallelism (ep=" + std::to_string(s.ep) +
                  ") with sp=on is not available in this build; hint: use sp=off with ep, or "
                  "ep=1 with sp");
  // Each context rank would route only its positions: capacities and drops would differ from
  // the single process's, and the expert exchange would carry different rows per cp rank.
  if (s.cp > 1 && s.ep > 1)
    return refuse("context parallelism (cp=" + std::to_string(s.cp) +
                  ") with expert parallelism (ep=" + std::to_string(s.ep) +
                  ") is not available in this build; hint: use cp=1 with ep, or ep=1 with cp");
  if (s.vpp > 1 && s.pp == 1)
    return refuse("vpp=" + std::to_string(s.vpp) +
                  " interleaves model chunks over pipeline stages, so it needs pp > 1; hint: add "
                  "pp=2 or drop vpp");
  if (s.sp && s.tp == 1)
    return refuse(
        "sp=on shards the sequence inside the tensor-parallel group, so it needs tp > 1; "
        "hint: add tp=2 or drop sp");
  const int mp = s.tp * s.pp * s.cp;
  if (world % mp != 0)
    return refuse("tp*pp*cp = " + std::to_string(mp) + " needs a multiple of " +
                  std::to_string(mp) + " processes, but " + std::to_string(world) +
                  " were started; hint: launch with --nproc-per-node " +
                  std::to_string(s.dp > 0 ? s.dp * mp : mp) + " (times --nnodes)");
  const int dp = world / mp;
  if (dp % s.ep != 0)
    return refuse("ep=" + std::to_string(s.ep) + " does not divide dp=" + std::to_string(dp) +
                  " (expert groups are carved out of the data-parallel ranks); hint: pick an ep "
                  "that divides dp");
  if (s.dp != 0 && s.dp != dp)
    return refuse("dp*tp*pp*cp = " + std::to_string(s.dp) + "*" + std::to_string(s.tp) + "*" +
                  std::to_string(s.pp) + "*" + std::to_string(s.cp) + " = " +
                  std::to_string(s.dp * mp) + ", but " + std::to_string(world) +
                  " processes were started; hint: launch with " + "--nproc-per-node " +
                  std::to_string(s.dp * mp) + " (times --nnodes)");
  if (s.pp > 1 && s.zero >= 2)
    return refuse("zero=" + std::to_string(s.zero) +
                  " with pp > 1: stages 2 and 3 reduce (and gather) every micro-batch, which a "
                  "pipeline runs many of between optimizer steps, as in DeepSpeed; hint: use "
                  "zero=1 with pipeline parallelism");
  if (s.ep > 1 && s.zero != 0)
    return refuse("zero=" + std::to_string(s.zero) +
                  " with ep > 1 is not available in this build (ZeRO would shard over the "
                  "data-parallel ranks tensors that differ between them: their experts); hint: "
                  "use zero=0 with expert parallelism");
  return OkStatus();
}

// The model against the split: what its shape admits.
Status check_model_split(const Strategy& s, const model::ModelSpec& spec, int seq) {
  if (s.tp > 1) {
    Status fits = model::check_tp_divides(spec, s.tp);
    if (!fits.ok()) return InvalidArgument(where(s) + fits.message());
  }
  if (s.pp > spec.num_hidden_layers)
    return InvalidArgument(where(s) + "pp=" + std::to_string(s.pp) + " stages but model '" +
                           spec.name + "' has " + std::to_string(spec.num_hidden_layers) +
                           " layers; hint: use at most one stage per layer");
  // Interleaved pipelining cuts the layers into pp*vpp equal chunks: they must divide.
  const int L = spec.num_hidden_layers, chunks = s.pp * s.vpp;
  if (s.vpp > 1 && L % chunks != 0) {
    std::string fits;
    for (int v = 1; v * s.pp <= L; ++v)
      if (L % (v * s.pp) == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(v);
    return InvalidArgument(where(s) + "vpp=" + std::to_string(s.vpp) + " cuts model '" + spec.name +
                           "' into pp*vpp = " + std::to_string(chunks) +
                           " equal chunks, but it has " + std::to_string(L) +
                           " layers; hint: use vpp in " + (fits.empty() ? "1" : fits));
  }
  if (s.cp > 1 && spec.is_moe())
    return InvalidArgument(where(s) + "context parallelism (cp=" + std::to_string(s.cp) +
                           ") with the MoE layers of model '" + spec.name +
                           "' is not available in this build (routing depends on which tokens "
                           "share a micro-batch); hint: use cp=1 for MoE models");
  // ep need not divide the experts: each rank holds ceil(E/ep) slots, the last ones maybe
  // empty (model/expert_placement.h), as after a lost rank's experts are spread.
  if (s.ep > 1 && (!spec.is_moe() || spec.num_local_experts < s.ep))
    return InvalidArgument(where(s) + "ep=" + std::to_string(s.ep) +
                           " needs at least one expert per rank, and model '" + spec.name +
                           "' has " + std::to_string(spec.num_local_experts) +
                           " experts; hint: use an MoE model and ep <= its expert count");
  if (s.cp > 1 && seq % (2 * s.cp) != 0)
    return InvalidArgument(where(s) + "cp=" + std::to_string(s.cp) + " cuts each sequence of " +
                           std::to_string(seq) + " tokens into 2*cp = " + std::to_string(2 * s.cp) +
                           " equal chunks; hint: pick a --seq-len that is a multiple of " +
                           std::to_string(2 * s.cp));
  const int local_tokens = s.mbs * (seq / s.cp);
  if (s.sp && s.mbs > 0 && local_tokens % s.tp != 0)
    return InvalidArgument(where(s) + "sp=on splits the " + std::to_string(local_tokens) +
                           " tokens of a micro-batch" + (s.cp > 1 ? " on each context rank" : "") +
                           " over tp=" + std::to_string(s.tp) +
                           " ranks; hint: pick mbs or --seq-len so that tp divides mbs*seq_len" +
                           (s.cp > 1 ? "/cp" : ""));
  return OkStatus();
}

// The data-parallel reduction: what each optimizer path runs with.
Status check_reduction(const Strategy& s, const EngineShape& shape) {
  const Compression& c = shape.compress;
  const std::string name = compression_name(c);
  const bool model_parallel = s.model_parallel();
  if (shape.world == 1 && (!c.none() || s.zero != 0))
    return InvalidArgument(std::string(!c.none() ? "--compress" : "zero>0") +
                           " needs several data-parallel processes; hint: add "
                           "--nproc-per-node 2 or more");
  if (c.two_stage() && model_parallel)
    return InvalidArgument("--compress " + name +
                           " with model parallelism (tp, pp, cp or ep > 1) is not available in "
                           "this build; hint: use --compress none or bf16");
  if (s.ep > 1 && !c.none())
    return InvalidArgument("ep=" + std::to_string(s.ep) + " with zero=" + std::to_string(s.zero) +
                           " and --compress " + name +
                           ": expert parallelism runs with zero=0 and --compress none in this "
                           "build");
  if (s.zero > 0 && !c.none())
    return InvalidArgument("--compress " + name +
                           " needs zero=0: compressed reductions keep full gradients or momenta "
                           "on every rank");
  return OkStatus();
}

}  // namespace

StatusOr<Compression> parse_compression(const std::string& text) {
  Compression c;
  if (text == "none") return c;
  if (text == "bf16" || text == "onebit") {
    c.kind = text == "bf16" ? Compression::Kind::kBf16 : Compression::Kind::kOneBit;
    return c;
  }
  const std::string prefix = "topk:";
  if (text.rfind(prefix, 0) != 0)
    return InvalidArgument("--compress '" + text + "': expected none, bf16, onebit or topk:RATIO");
  char* end = nullptr;
  const double r = std::strtod(text.c_str() + prefix.size(), &end);
  if (*end != '\0' || !(r > 0.0) || r > 1.0)
    return InvalidArgument("--compress '" + text +
                           "': the top-k ratio must be a number in (0, 1], e.g. topk:0.01");
  c.kind = Compression::Kind::kTopK;
  c.topk_ratio = r;
  return c;
}

std::string compression_name(const Compression& c) {
  switch (c.kind) {
    case Compression::Kind::kNone:
      return "none";
    case Compression::Kind::kBf16:
      return "bf16";
    case Compression::Kind::kOneBit:
      return "onebit";
    case Compression::Kind::kTopK: {
      char buf[48];
      std::snprintf(buf, sizeof(buf), "topk:%g", c.topk_ratio);
      return buf;
    }
  }
  return "?";
}

int engine_data_parallel(const Strategy& s, int world) {
  return world / (s.tp * s.pp * s.cp);
}

Status engine_supports(const Strategy& s, const model::ModelSpec& spec, const EngineShape& shape) {
  if (spec.architecture == model::Architecture::kVit)
    return InvalidArgument("model '" + spec.name +
                           "' is a vit: the trainer runs gpt and bert models, vit specs are for "
                           "planning; hint: use `cann-train search --model " +
                           spec.name + "`");
  CANN_RETURN_IF_ERROR(model::engine_builds(spec));
  EngineShape run = shape;
  if (run.world <= 0) run.world = (s.dp > 0 ? s.dp : 1) * s.tp * s.pp * s.cp;
  // Across elastic nodes each generation has its own world: a dp= given at launch follows it.
  Strategy layout = s;
  if (run.elastic_nodes) layout.dp = 0;
  CANN_RETURN_IF_ERROR(check_layout(layout, run.world));
  const int seq = run.seq_len > 0 ? run.seq_len : spec.seq_length;
  CANN_RETURN_IF_ERROR(check_model_split(s, spec, seq));
  CANN_RETURN_IF_ERROR(check_reduction(s, run));
  return OkStatus();
}

}  // namespace cann::plan
