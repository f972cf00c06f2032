// `cann-train debug logits DIR --data D --seq-len T --out FILE`: the logits and loss of a
// Hugging Face model directory (as `run --init-from DIR` loads it) on every training window of
// D, one process, no update. The windows are the sampler's (offsets 0, T, 2T, ... of the
// training stream), so with a stream of B*T+1 tokens they are exactly the B sequences of
// `run`'s first step, in window order; a reference implementation given the same tokens
// compares its logits to these.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "ckpt/safetensors.h"
#include "cli/commands.h"
#include "data/dataset.h"
#include "model/model.h"
#include "train/hf_weights.h"

namespace cann::cli {
namespace {

struct LogitsFlags {
  std::string dir, data, out;
  int seq_len = 0;
  int threads = 0;
};

Status write_logits(const LogitsFlags& f) {
  CANN_ASSIGN_OR_RETURN(const model::ModelSpec spec, train::hf_dir_spec(f.dir));
  CANN_ASSIGN_OR_RETURN(const data::Dataset d, data::load_dataset(f.data));
  const int T = f.seq_len > 0 ? f.seq_len : spec.seq_length;
  const int B = T > 0 ? static_cast<int>((d.train.size() - 1) / T) : 0;
  if (B < 1)
    return InvalidArgument(f.data + ": its training stream of " + std::to_string(d.train.size()) +
                           " tokens holds no window of " + std::to_string(T + 1) +
                           "; hint: lower --seq-len or give more tokens");
  if (d.max_token >= spec.vocab_size)
    return InvalidArgument(f.data + ": token " + std::to_string(d.max_token) +
                           " is past the model's vocab_size " + std::to_string(spec.vocab_size));
  CANN_ASSIGN_OR_RETURN(auto m, model::Model::create(spec, B, T));
  std::vector<float> full;
  CANN_RETURN_IF_ERROR(train::load_hf_weights(spec, f.dir, &full));
  model::slice_from_full(m->table(), full.data(), m->table(), {}, m->params());
  std::vector<int> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs[b * T + t] = d.train[static_cast<size_t>(b) * T + t];
      targets[b * T + t] = d.train[static_cast<size_t>(b) * T + t + 1];
    }
  const model::ForwardStats stats = m->forward(inputs.data(), targets.data(), B, T);
  m->forward(inputs.data(), nullptr, B, T);
  const size_t V = static_cast<size_t>(spec.vocab_size);
  ckpt::SafeTensors st;
  st.metadata = {{"format", "cann-train logits"}, {"model", f.dir}, {"data", f.data}};
  st.tensors.push_back({"logits",
                        {B, T, spec.vocab_size},
                        std::vector<float>(m->logits(), m->logits() + inputs.size() * V)});
  st.tensors.push_back({"inputs", {B, T}, std::vector<float>(inputs.begin(), inputs.end())});
  st.tensors.push_back({"loss", {1}, {static_cast<float>(stats.loss)}});
  return ckpt::write_safetensors(f.out, st);
}

}  // namespace

CommandMain add_debug_logits_command(CLI::App* debug) {
  auto f = std::make_shared<LogitsFlags>();
  CLI::App* cmd = debug->add_subcommand(
      "logits",
      "Logits and loss of a Hugging Face model directory on every training window of --data "
      "(safetensors: logits (B,T,V), inputs (B,T), loss), to compare with a reference");
  cmd->add_option("dir", f->dir, "Model directory: config.json and *.safetensors")->required();
  cmd->add_option("--data", f->data, "Token data as `run --data` reads it")->required();
  cmd->add_option("--seq-len", f->seq_len, "Tokens per window (default: the model's seq_length)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", f->out, "Safetensors file to write")->required();
  return [f]() -> int {
    const Status s = write_logits(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "cann-train debug logits: error: %s\n", s.message().c_str());
      return s.exit_code();
    }
    std::printf("logits written to %s\n", f->out.c_str());
    return 0;
  };
}

}  // namespace cann::cli
