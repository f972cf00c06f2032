// The engine's feature check (see engine_support.h).
#include "model/engine_support.h"

#include <cstdio>
#include <vector>

namespace cann::model {

Status engine_builds(const ModelSpec& s) {
  if (s.architecture == Architecture::kVit)
    return InvalidArgument(s.source +
                           ": the trainer runs gpt and bert models; vit specs are for planning "
                           "(cann-train search/simulate); hint: pick a gpt or bert config");
  std::vector<std::string> needs;
  if (!s.attention_window.empty()) needs.push_back("sliding-window attention");
  if (s.is_moe()) {
    // The Switch/Mixtral loss is defined over softmax probabilities.
    if (s.router_score == RouterScore::kSigmoid && s.aux_loss == AuxLoss::kBatch &&
        s.router_aux_loss_coef > 0)
      needs.push_back("the batch balance loss over sigmoid scores");
  }
  if (s.num_nextn_predict_layers > 0) needs.push_back("multi-token prediction");
  if (needs.empty()) return OkStatus();
  std::string list;
  for (size_t i = 0; i < needs.size(); ++i)
    list += (i == 0 ? "" : i + 1 == needs.size() ? " and " : ", ") + needs[i];
  return InvalidArgument("model '" + s.name + "' (" + std::string(family_name(s.family)) + ", " +
                         s.source + ") needs " + list +
                         ", which this build's engine does not train; hint: plan it with "
                         "`cann-train search` or `simulate`, or train another config");
}

std::string engine_notice(const ModelSpec& s) {
  const double p = s.attention_dropout > s.hidden_dropout ? s.attention_dropout : s.hidden_dropout;
  if (p <= 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return "model '" + s.name + "': dropout " + buf +
         " in the config is not applied: the engine trains without dropout";
}

}  // namespace cann::model
