// Strategy string parsing, printing and validation. Errors name the key and the numbers that
// disagree, and say what to change; they never guess a fix silently.
#include "plan/strategy.h"

#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

namespace cann::plan {
namespace {

const char* const kKeys[] = {"dp",  "tp",  "pp",   "ep",        "cp", "sp",
                             "mbs", "gbs", "zero", "recompute", "vpp"};

std::string key_list() {
  std::string s;
  for (const char* k : kKeys) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

Status bad(const std::string& what) {
  return InvalidArgument("strategy: " + what);
}

StatusOr<int> positive_int(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n <= 0 || n > (1 << 30))
    return bad("key '" + key + "': expected a positive integer, got '" + v + "'");
  return static_cast<int>(n);
}

// Divisors of n, as a hint list ("1, 2, 4, 8").
std::string divisors_hint(int n, int limit) {
  std::string s;
  for (int d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

// Tensor-parallel size against the model's heads and the cluster's nodes: checked before dp
// is derived, so "tp=5" hears about the heads, not about the device count.
Status validate_tp(const Strategy& s, const model::ModelSpec& m, const ClusterSpec& c) {
  if (m.num_attention_heads % s.tp != 0)
    return bad("tp=" + std::to_string(s.tp) + " does not divide num_attention_heads " +
               std::to_string(m.num_attention_heads) + " of model " + m.name +
               "; hint: use tp in " + divisors_hint(m.num_attention_heads, 64));
  const int kv = m.num_key_value_heads;
  if (kv % s.tp != 0 && s.tp % kv != 0)
    return bad("tp=" + std::to_string(s.tp) + " and num_key_value_heads " + std::to_string(kv) +
               " of model " + m.name +
               ": one must divide the other (kv heads are split, or replicated when tp is "
               "larger); hint: use tp in " +
               divisors_hint(m.num_attention_heads, 64));
  const int dpn = c.devices_per_node;
  if (!c.allow_cross_node_tp && (s.tp > dpn || dpn % s.tp != 0))
    return bad("tp=" + std::to_string(s.tp) + " does not fit the " + std::to_string(dpn) +
               "-device nodes of cluster " + c.name +
               " (tensor parallelism stays inside a node); hint: use tp in " +
               divisors_hint(dpn, dpn) + ", or set allow_cross_node_tp: true in the cluster spec");
  return OkStatus();
}

}  // namespace

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kOp:
      return "op";
  }
  return "?";
}

std::string recompute_text(const Strategy& s) {
  std::string out(recompute_name(s.recompute));
  if (s.recompute == Recompute::kFull && s.recompute_every > 1)
    out += ":" + std::to_string(s.recompute_every);
  return out;
}

std::string strategy_string(const Strategy& s) {
  std::ostringstream o;
  o << "dp=" << s.dp << ",tp=" << s.tp << ",pp=" << s.pp << ",ep=" << s.ep << ",cp=" << s.cp
    << ",sp=" << (s.sp ? "on" : "off") << ",mbs=" << s.mbs << ",gbs=" << s.gbs << ",zero=" << s.zero
    << ",recompute=" << recompute_text(s) << ",vpp=" << s.vpp;
  return o.str();
}

std::string strategy_brief(const Strategy& s) {
  std::ostringstream o;
  auto key = [&](bool given, const char* name, const std::string& value) {
    if (given) o << (o.tellp() > 0 ? "," : "") << name << "=" << value;
  };
  key(s.dp != 0, "dp", std::to_string(s.dp));
  key(s.tp != 1, "tp", std::to_string(s.tp));
  key(s.pp != 1, "pp", std::to_string(s.pp));
  key(s.ep != 1, "ep", std::to_string(s.ep));
  key(s.cp != 1, "cp", std::to_string(s.cp));
  key(s.sp, "sp", "on");
  key(s.mbs != 0, "mbs", std::to_string(s.mbs));
  key(s.gbs != 0, "gbs", std::to_string(s.gbs));
  key(s.zero != 0, "zero", std::to_string(s.zero));
  key(s.recompute != Recompute::kNone, "recompute", recompute_text(s));
  key(s.vpp != 1, "vpp", std::to_string(s.vpp));
  return o.tellp() > 0 ? o.str() : "dp";
}

StatusOr<Strategy> parse_strategy(const std::string& text) {
  Strategy s;
  s.dp = 0;  // 0: not given, derived from the device count
  s.mbs = 0;
  s.gbs = 0;
  if (text.empty()) return bad("empty string; hint: e.g. 'tp=8,pp=4,mbs=1'");
  std::set<std::string> seen;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    // Spaces around items are harmless ("tp=8, pp=2").
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    const size_t eq = item.find('=');
    if (item.empty()) return bad("empty item in '" + text + "'; hint: remove the extra comma");
    if (eq == std::string::npos)
      return bad("item '" + item + "' is not key=value; hint: e.g. 'tp=8'");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    bool known = false;
    for (const char* k : kKeys) known |= key == k;
    if (!known) return bad("unknown key '" + key + "'; hint: the keys are " + key_list());
    if (!seen.insert(key).second) return bad("key '" + key + "' given twice");
    if (key == "sp") {
      if (v == "on" || v == "true" || v == "1") {
        s.sp = true;
      } else if (v == "off" || v == "false" || v == "0") {
        s.sp = false;
      } else {
        return bad("key 'sp': expected on or off, got '" + v + "'");
      }
    } else if (key == "recompute") {
      if (v == "none") {
        s.recompute = Recompute::kNone;
      } else if (v == "selective") {
        s.recompute = Recompute::kSelective;
      } else if (v == "full") {
        s.recompute = Recompute::kFull;
      } else if (v == "op") {
        s.recompute = Recompute::kOp;
      } else if (v.starts_with("full:")) {
        const std::string k = v.substr(5);
        char* end = nullptr;
        const long every = std::strtol(k.c_str(), &end, 10);
        if (k.empty() || *end != '\0' || every < 1 || every > 1000000)
          return bad(
              "key 'recompute': full:K recomputes every K-th layer, K a positive "
              "integer, got '" +
              v + "'");
        s.recompute = Recompute::kFull;
        s.recompute_every = static_cast<int>(every);
      } else {
        return bad("key 'recompute': expected none, selective, full, full:K or op, got '" + v +
                   "'");
      }
    } else if (key == "zero") {
      if (v.size() != 1 || v[0] < '0' || v[0] > '3')
        return bad("key 'zero': expected a ZeRO stage 0, 1, 2 or 3, got '" + v + "'");
      s.zero = v[0] - '0';
    } else {
      CANN_ASSIGN_OR_RETURN(int n, positive_int(key, v));
      if (key == "dp") s.dp = n;
      if (key == "tp") s.tp = n;
      if (key == "pp") s.pp = n;
      if (key == "ep") s.ep = n;
      if (key == "cp") s.cp = n;
      if (key == "mbs") s.mbs = n;
      if (key == "gbs") s.gbs = n;
      if (key == "vpp") s.vpp = n;
    }
  }
  return s;
}

StatusOr<Strategy> resolve_strategy(Strategy s, const model::ModelSpec& m, const ClusterSpec& c,
                                    int default_gbs) {
  const int n = c.num_devices();
  CANN_RETURN_IF_ERROR(validate_tp(s, m, c));
  if (s.dp == 0) {
    const long long rest = static_cast<long long>(s.tp) * s.pp * s.cp;
    if (n % rest != 0)
      return bad("tp*pp*cp = " + std::to_string(s.tp) + "*" + std::to_string(s.pp) + "*" +
                 std::to_string(s.cp) + " = " + std::to_string(rest) + " does not divide the " +
                 std::to_string(n) + " devices of cluster " + c.name +
                 ", so no dp fits; hint: pick sizes whose product divides " + std::to_string(n));
    s.dp = static_cast<int>(n / rest);
  }
  if (s.mbs == 0) s.mbs = 1;
  if (s.gbs == 0) s.gbs = default_gbs > 0 ? default_gbs : s.dp * s.mbs;
  CANN_RETURN_IF_ERROR(validate_strategy(s, m, c));
  return s;
}

Status validate_strategy(const Strategy& s, const model::ModelSpec& m, const ClusterSpec& c) {
  const int n = c.num_devices();
  const long long prod = static_cast<long long>(s.dp) * s.tp * s.pp * s.cp;
  if (prod != n)
    return bad("dp*tp*pp*cp = " + std::to_string(s.dp) + "*" + std::to_string(s.tp) + "*" +
               std::to_string(s.pp) + "*" + std::to_string(s.cp) + " = " + std::to_string(prod) +
               ", but cluster " + c.name + " has " + std::to_string(n) +
               " devices; hint: make the product " + std::to_string(n) +
               " (or leave dp out and it is derived)");
  CANN_RETURN_IF_ERROR(validate_tp(s, m, c));
  if (s.ep > 1 && !m.is_moe())
    return bad("ep=" + std::to_string(s.ep) + " but model " + m.name +
               " has no experts; hint: use ep=1");
  if (s.dp % s.ep != 0)
    return bad("ep=" + std::to_string(s.ep) + " does not divide dp=" + std::to_string(s.dp) +
               " (expert groups are carved out of the data-parallel ranks); hint: use ep in " +
               divisors_hint(s.dp, s.dp));
  // ep need not divide the experts: each rank holds ceil(E/ep) of them, as cann-train's
  // engine trains it (model/expert_placement.h); Megatron-Core and DeepSpeed refuse that, so
  // the search offers it only for the engine and the launch lines say so.
  if (m.is_moe() && m.num_local_experts < s.ep)
    return bad("ep=" + std::to_string(s.ep) + " exceeds the " +
               std::to_string(m.num_local_experts) + " experts of model " + m.name +
               "; hint: use ep at most " + std::to_string(m.num_local_experts));
  if (m.seq_length % s.cp != 0)
    return bad("cp=" + std::to_string(s.cp) + " does not divide seq_length " +
               std::to_string(m.seq_length) + " of model " + m.name);
  if (s.pp * s.vpp > m.num_hidden_layers)
    return bad("pp*vpp = " + std::to_string(s.pp) + "*" + std::to_string(s.vpp) + " = " +
               std::to_string(s.pp * s.vpp) + " exceeds the " +
               std::to_string(m.num_hidden_layers) + " layers of model " + m.name +
               "; hint: every pipeline chunk needs at least one layer");
  if (s.sp && s.tp == 1)
    return bad(
        "sp=on needs tp>1 (sequence parallelism splits the tensor group's layernorm and "
        "dropout work); hint: set sp=off or tp>1");
  if (s.gbs % (s.dp * s.mbs) != 0)
    return bad("gbs=" + std::to_string(s.gbs) +
               " is not a multiple of dp*mbs = " + std::to_string(s.dp) + "*" +
               std::to_string(s.mbs) + " = " + std::to_string(s.dp * s.mbs) +
               "; hint: use gbs=" + std::to_string((s.gbs / (s.dp * s.mbs) + 1) * s.dp * s.mbs));
  if (s.vpp > 1 && s.pp == 1)
    return bad("vpp=" + std::to_string(s.vpp) +
               " needs pp>1 (it interleaves model chunks over pipeline stages); hint: vpp=1");
  if (s.vpp > 1 && m.num_hidden_layers % (s.pp * s.vpp) != 0)
    return bad("vpp=" + std::to_string(s.vpp) + " needs the " +
               std::to_string(m.num_hidden_layers) + " layers of model " + m.name +
               " to split into pp*vpp = " + std::to_string(s.pp * s.vpp) +
               " equal chunks (Megatron-LM's interleaved schedule); hint: use vpp in " + [&] {
                 std::string h;
                 for (int v = 1; v * s.pp <= m.num_hidden_layers; ++v)
                   if (m.num_hidden_layers % (v * s.pp) == 0)
                     h += (h.empty() ? "" : ", ") + std::to_string(v);
                 return h;
               }());
  if (s.vpp > 1 && s.micro_batches() % s.pp != 0)
    return bad("vpp=" + std::to_string(s.vpp) +
               " needs the micro-batch count gbs/(dp*mbs) = " + std::to_string(s.micro_batches()) +
               " to be a multiple of pp=" + std::to_string(s.pp) +
               " (interleaved 1F1B runs micro-batches in groups of pp)");
  if (s.recompute_every > m.num_hidden_layers)
    return bad("recompute=full:" + std::to_string(s.recompute_every) + " recomputes every " +
               std::to_string(s.recompute_every) + "-th layer, but model " + m.name + " has " +
               std::to_string(m.num_hidden_layers) + "; hint: use K at most " +
               std::to_string(m.num_hidden_layers));
  if (s.recompute == Recompute::kOp) {
    // torchtitan's policy counts aten.mm calls: a linear layer with a bias calls addmm, and
    // expert and latent-attention blocks run matmuls its count would order otherwise.
    std::string why;
    if (m.is_moe()) why = "expert layers";
    if (m.mla_enabled) why = "latent attention";
    if (m.qkv_bias || m.o_bias || m.mlp_bias) why = "biases on its linear layers";
    if (!why.empty())
      return bad(
          "recompute=op prices torchtitan's per-operator policy on bias-free dense "
          "blocks, and model " +
          m.name + " has " + why + "; hint: use recompute=selective or full");
    if (c.device.attention != AttentionKernel::kFused || c.device.precision == Precision::kFp32)
      return bad("recompute=op keeps the output of a fused attention kernel, which cluster " +
                 c.name +
                 " does not run (fp32, or attention: materialized); hint: use "
                 "recompute=selective or full");
  }
  return OkStatus();
}

}  // namespace cann::plan
