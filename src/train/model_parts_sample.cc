// The text sample at the end of a run: the model continues the start of the first validation
// document, one token at a time at temperature 0.8, with the last seq_len tokens as context.
//
// Under model parallelism the forward is a collective, so every rank runs this loop in step:
// a pipeline passes the context through its stages (PipelineRunner::forward_only), the last
// stage's tensor-parallel ranks gather their vocabulary slices of the logits, and every rank
// holding the head draws the same token (same seed, same logits). The others learn it from a
// max-reduction over the world, where they offer -1. With sequence parallelism the context is
// cut to a multiple of tp tokens, since sp splits a micro-batch's tokens over the tp ranks.
// Context parallelism needs a multiple of 2*cp (times tp under sp): the context is padded on
// the right instead, which causal attention keeps from touching the positions before it (so
// the text is the single process's), or cut where padding would pass seq_len; the cp rank
// holding the context's last position draws the token.
#include <algorithm>
#include <cmath>

#include "data/tokenizer.h"
#include "parallel/pipeline_runner.h"
#include "train/model_parts.h"

namespace cann::train {

StatusOr<std::string> ModelParts::generate_sample(const data::Dataset& data, uint64_t seed,
                                                  int tokens) {
  const plan::Strategy& layout = layout_.strategy;
  const int T = layout_.seq_len, V = model_->spec().vocab_size;
  std::vector<int> ctx;
  for (size_t i = 0; i < data.val.size() && ctx.size() < 16; ++i) {
    ctx.push_back(data.val[i]);
    if (data.byte_level && data.val[i] == '\n' && ctx.size() > 1) break;
  }
  const size_t prompt_len = ctx.size();
  const int tp = mp_ ? layout.tp : 1, cp = layout.cp;
  const int cp_rank = model_->context_parallel().rank;
  std::vector<int> window;
  const int vocab_rows = (V + tp - 1) / tp;  // logits per row on one tp rank (padded)
  std::vector<float> gathered(static_cast<size_t>(vocab_rows) * tp);
  Rng rng(seed ^ 0x9e4e7a7eULL);
  std::vector<float> probs(V);
  for (int n = 0; n < tokens; ++n) {
    int len = std::min<int>(static_cast<int>(ctx.size()), T);
    int padded = len;  // the tokens the forward runs: the context, then padding
    if (cp > 1) {
      const int unit = 2 * cp * (layout.sp ? tp : 1);
      padded = (len + unit - 1) / unit * unit;
      if (padded > T) padded = len -= len % unit;
    } else if (layout.sp) {
      len -= len % tp;
      padded = len;
    }
    if (len == 0) break;  // a context shorter than one token per shard cannot be split
    window.assign(ctx.end() - len, ctx.end());
    window.resize(padded, 0);
    if (pipeline_) {
      CANN_RETURN_IF_ERROR(pipeline_->forward_only(window.data(), nullptr, 1, padded).status());
    } else {
      model_->forward(window.data(), nullptr, 1, padded);
    }
    CANN_RETURN_IF_ERROR(model_->tp_status());
    // The row of position len - 1. Under cp, chunk c of size padded/(2cp) lies on rank c
    // (first half) or 2cp-1-c (second half), as its first or second local chunk.
    int owner = 0, row = len - 1;
    if (cp > 1) {
      const int chunk = padded / (2 * cp), c = (len - 1) / chunk;
      owner = c < cp ? c : 2 * cp - 1 - c;
      row = (c < cp ? 0 : chunk) + (len - 1) % chunk;
    }
    float next = -1.0f;
    if (model_->has_head() && cp_rank == owner) {
      const float* logits = model_->logits() + static_cast<size_t>(row) * vocab_rows;
      if (tp > 1) {
        // Rank r holds rows [r * vocab_rows, (r + 1) * vocab_rows); padding only at the end.
        CANN_RETURN_IF_ERROR(
            mp_->tensor_parallel().comm->allgather(gathered.data(), logits, vocab_rows));
        logits = gathered.data();
      }
      float mx = logits[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
      double sum = 0.0;
      for (int v = 0; v < V; ++v) sum += (probs[v] = std::exp((logits[v] - mx) / 0.8f));
      double r = rng.uniform() * sum;
      next = static_cast<float>(V - 1);
      for (int v = 0; v < V; ++v) {
        r -= probs[v];
        if (r <= 0) {
          next = static_cast<float>(v);
          break;
        }
      }
    }
    if (mp_ && (layout.pp > 1 || cp > 1))  // token ids below 2^24 are exact in fp32
      CANN_RETURN_IF_ERROR(
          world_->allreduce(&next, 1, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
    ctx.push_back(static_cast<int>(next));
  }
  const std::string prompt = data::decode_bytes({ctx.data(), prompt_len});
  const std::string text = data::decode_bytes({ctx.data() + prompt_len, ctx.size() - prompt_len});
  return prompt + text;
}

}  // namespace cann::train
