// `cann-train debug grads LOG_OR_CHECKPOINT`: gradient health from a step log written with
// --grad-norms (debug/grad_summary.h), or from a checkpoint; and for a gradient dump of
// `run --dump-grads` its per-tensor norms, or with --compare its deviation from another dump.
//
// A checkpoint holds no gradients, but AdamW's moments are running averages of them: m of the
// gradient (beta1 = 0.9: about the last 10 steps) and v of its square (beta2 = 0.95: about the
// last 20). So per layer, sqrt(sum v / (1 - beta2^t)) is the root-mean-square gradient norm of
// the recent steps (bias-corrected as Adam does at step t), and |m| / (1 - beta1^t) the norm of
// their mean; a layer with NaN/Inf in parameters or moments is named.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "cli/commands.h"
#include "core/fs.h"
#include "debug/grad_compare.h"
#include "debug/grad_summary.h"
#include "optim/adamw.h"

namespace cann::cli {
namespace {

// "h.3.attn.qkv.w" -> "h.3"; "wte", "wpe" -> "embed"; "lnf.w" -> "ln_f".
std::string layer_of(const std::string& tensor) {
  if (tensor.rfind("h.", 0) == 0) {
    const size_t dot = tensor.find('.', 2);
    return tensor.substr(0, dot);
  }
  if (tensor == "wte" || tensor == "wpe") return "embed";
  if (tensor.rfind("lnf", 0) == 0) return "ln_f";
  return tensor;
}

struct LayerMoments {
  double param_sq = 0, m_sq = 0, v_sum = 0;
  size_t nonfinite_params = 0, nonfinite_moments = 0;
};

StatusOr<std::string> summarize_checkpoint(const std::string& path) {
  StatusOr<ckpt::LoadedCheckpoint> ck = path_exists(join_path(path, "manifest.json"))
                                            ? ckpt::read_checkpoint(path)
                                            : ckpt::read_latest_checkpoint(path);
  if (!ck.ok()) return ck.status();
  const auto meta = nlohmann::json::parse(ck->meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.contains("param_table") || !meta["param_table"].is_array())
    return InvalidArgument(ck->path +
                           ": the manifest has no param_table; hint: pass a "
                           "checkpoint written by `cann-train run`");
  const ckpt::Section* params = ck->find("params");
  const ckpt::Section* m = ck->find("adam_m");
  const ckpt::Section* v = ck->find("adam_v");
  if (params == nullptr || m == nullptr || v == nullptr)
    return InvalidArgument(ck->path +
                           ": no params/adam_m/adam_v sections (not an AdamW "
                           "checkpoint)");
  const size_t floats = params->data.size() / sizeof(float);
  if (m->data.size() != params->data.size() || v->data.size() != params->data.size())
    return InvalidArgument(ck->path + ": moment sections differ in size from params");
  const auto* p = reinterpret_cast<const float*>(params->data.data());
  const auto* pm = reinterpret_cast<const float*>(m->data.data());
  const auto* pv = reinterpret_cast<const float*>(v->data.data());
  int opt_step = static_cast<int>(ck->step);
  if (meta.contains("optimizer") && meta["optimizer"].contains("step") &&
      meta["optimizer"]["step"].is_number_integer())
    opt_step = meta["optimizer"]["step"].get<int>();
  std::vector<std::string> order;
  std::map<std::string, LayerMoments> layers;
  for (const auto& t : meta["param_table"]) {
    if (!t.contains("name") || !t.contains("offset") || !t.contains("shape") ||
        !t["offset"].is_number_unsigned() || !t["shape"].is_array())
      return InvalidArgument(ck->path + ": malformed param_table entry " + t.dump());
    size_t numel = 1;
    for (const auto& d : t["shape"]) numel *= d.is_number_unsigned() ? d.get<size_t>() : 0;
    const size_t off = t["offset"].get<size_t>();
    if (off + numel > floats)
      return InvalidArgument(ck->path + ": tensor " + t["name"].dump() +
                             " lies beyond the params section");
    const std::string layer = layer_of(t["name"].get<std::string>());
    if (!layers.count(layer)) order.push_back(layer);
    LayerMoments& lm = layers[layer];
    for (size_t i = off; i < off + numel; ++i) {
      if (!std::isfinite(p[i])) {
        ++lm.nonfinite_params;
      } else {
        lm.param_sq += static_cast<double>(p[i]) * p[i];
      }
      if (!std::isfinite(pm[i]) || !std::isfinite(pv[i])) {
        ++lm.nonfinite_moments;
      } else {
        lm.m_sq += static_cast<double>(pm[i]) * pm[i];
        lm.v_sum += pv[i];
      }
    }
  }
  const optim::AdamWConfig adam;
  const double c1 = opt_step > 0 ? 1.0 - std::pow(adam.beta1, opt_step) : 1.0;
  const double c2 = opt_step > 0 ? 1.0 - std::pow(adam.beta2, opt_step) : 1.0;
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%s: step %lld, AdamW step %d; gradients estimated from the moments (recent "
                "steps)\n",
                ck->path.c_str(), static_cast<long long>(ck->step), opt_step);
  out += buf;
  std::snprintf(buf, sizeof(buf), "  %-10s %12s %14s %14s  %s\n", "layer", "param norm",
                "grad rms norm", "grad mean norm", "non-finite");
  out += buf;
  std::string first_bad;
  for (const std::string& name : order) {
    const LayerMoments& l = layers[name];
    std::string bad = "none";
    if (l.nonfinite_params + l.nonfinite_moments > 0) {
      bad = std::to_string(l.nonfinite_params) + " params, " + std::to_string(l.nonfinite_moments) +
            " moments";
      first_bad = name;  // forward order: the last one is the first in backward order
    }
    std::snprintf(buf, sizeof(buf), "  %-10s %12.4g %14.4g %14.4g  %s\n", name.c_str(),
                  std::sqrt(l.param_sq), std::sqrt(l.v_sum / c2), std::sqrt(l.m_sq) / c1,
                  bad.c_str());
    out += buf;
  }
  out += first_bad.empty()
             ? "  every parameter and moment finite\n"
             : "  non-finite values, first in backward order: layer " + first_bad + "\n";
  return out;
}

// A dump of `run --dump-grads`: a safetensors file, whose JSON header starts at byte 8.
bool is_grad_dump(const std::string& path, const std::string& bytes) {
  const std::string ext = ".safetensors";
  return (path.size() >= ext.size() &&
          path.compare(path.size() - ext.size(), ext.size(), ext) == 0) ||
         (bytes.size() > 8 && bytes[8] == '{');
}

struct GradsArgs {
  std::string path, compare;
  double tolerance = 0;
};

// The dump's norms, or its comparison with --compare (exit 1 when a tensor is over
// --tolerance).
int grad_dump_main(const GradsArgs& a, const std::string& bytes,
                   const std::function<int(const Status&)>& fail) {
  auto got = ckpt::decode_safetensors(bytes, a.path);
  if (!got.ok()) return fail(got.status());
  if (a.compare.empty()) {
    std::fputs(debug::format_grad_dump(*got, a.path).c_str(), stdout);
    return 0;
  }
  auto ref = ckpt::read_safetensors(a.compare);
  if (!ref.ok()) return fail(ref.status());
  auto rows = debug::compare_grads(*got, *ref, a.path, a.compare);
  if (!rows.ok()) return fail(rows.status());
  std::fputs(debug::format_grad_comparison(*rows, a.tolerance).c_str(), stdout);
  for (const auto& r : *rows)
    if (a.tolerance > 0 && !(r.relative <= a.tolerance)) return 1;
  return 0;
}

}  // namespace

CommandMain add_debug_grads_command(CLI::App* debug) {
  auto args = std::make_shared<GradsArgs>();
  std::string* path = &args->path;
  CLI::App* grads = debug->add_subcommand(
      "grads",
      "Gradient health: per-layer norm statistics (min/median/max, trend, spikes) and the first "
      "non-finite gradient from a step log written with --grad-norms, per-layer gradient "
      "estimates from a checkpoint's AdamW moments, or a --dump-grads file's per-tensor norms "
      "and its deviation from another (--compare)");
  grads
      ->add_option("LOG_OR_CHECKPOINT", *path,
                   "A --log-json step log, a checkpoint step directory, or a --checkpoint-dir "
                   "(its newest checkpoint)")
      ->required();
  grads
      ->add_option("--compare", args->compare,
                   "With a --dump-grads file: a reference dump; prints each tensor's largest "
                   "difference relative to the reference tensor's largest entry")
      ->check(CLI::ExistingFile);
  grads
      ->add_option("--tolerance", args->tolerance,
                   "With --compare: exit 1 when some tensor's relative deviation is above this")
      ->check(CLI::NonNegativeNumber);
  return [args, path]() -> int {
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "cann-train debug grads: error: %s\n", s.message().c_str());
      return s.exit_code();
    };
    if (!path_exists(*path))
      return fail(NotFound(*path + ": no such file or directory; hint: pass the step log of "
                                   "`run --log-json FILE --grad-norms` or a checkpoint directory"));
    if (is_directory(*path)) {
      if (!args->compare.empty())
        return fail(InvalidArgument("--compare takes two gradient dumps, and " + *path +
                                    " is a directory; hint: write them with `run --dump-grads "
                                    "FILE`"));
      auto report = summarize_checkpoint(*path);
      if (!report.ok()) return fail(report.status());
      std::fputs(report->c_str(), stdout);
      return 0;
    }
    auto text = read_file(*path);
    if (!text.ok()) return fail(text.status());
    if (is_grad_dump(*path, *text)) return grad_dump_main(*args, *text, fail);
    if (!args->compare.empty())
      return fail(InvalidArgument("--compare takes two gradient dumps, and " + *path +
                                  " is not one; hint: write them with `run --dump-grads FILE`"));
    auto summary = debug::summarize_grad_log(*text, *path);
    if (!summary.ok()) return fail(summary.status());
    std::fputs(debug::format_grad_summary(*summary, *path).c_str(), stdout);
    return 0;
  };
}

}  // namespace cann::cli
