// Tiny models of every family with Hugging Face weights, shared by the weight I/O, bad-input
// and reference tests: their config.json text, a random parameter buffer, an llm.c token shard
// and a raw safetensors writer for files of any dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/param_table.h"
#include "model/spec.h"

namespace cann::test {

struct HfTestModel {
  std::string family;  // "llama", ..., "gpt2"
  std::string config;  // config.json text
};

// One small model per family (2-3 layers, hidden 32, vocab 64; MoE ones with 4-8 experts,
// DeepSeek-V3 with MLA, a dense first layer, sigmoid scores and group-limited top-2 routing;
// Mixtral with its balance loss on, so that the loss and gradients include it; two dense
// DeepSeek models, with and without the low-rank query, for multi-head latent attention alone).
const std::vector<HfTestModel>& hf_test_models();
model::ModelSpec hf_test_spec(const HfTestModel& m);

// The single-process parameters of `spec`, drawn from Rng(seed): matrices N(0, 0.1), biases
// N(0, 0.05), norm gains 1 + N(0, 0.1); padding zero.
std::vector<float> random_params(const model::ModelSpec& spec, uint64_t seed);

// An llm.c token shard of `tokens` (ids < 65536).
void write_token_shard(const std::string& path, const std::vector<int>& tokens);

// The token data of a test run in dir: train.bin of exactly `windows` windows of seq_len
// (windows * seq_len + 1 tokens: one step's batch of `windows` sequences) and val.bin of as
// many, ids below 64 (the test models' vocabulary).
void write_token_data(const std::string& dir, uint64_t seed, int windows, int seq_len);

// A safetensors file with one tensor per entry, each with its raw little-endian bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors);

}  // namespace cann::test
