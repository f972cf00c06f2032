// The resumable sampler: which windows of the token stream make up each batch.
//
// The stream of n tokens holds W = (n - 1) / T windows of T+1 tokens at offsets 0, T, 2T, ...
// (input = window[0:T], target = window[1:T+1]). Epoch e visits the windows in a permutation
// drawn from (seed, e). Global sample i is window perm_{i / W}[i % W]. The sampler's whole
// state is (seed, consumed): resuming restores the exact sequence, and a distributed job can
// re-stride it (rank r of R takes global samples consumed + r, + r + R, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace cann::data {

struct SamplerState {
  uint64_t seed = 0;
  uint64_t consumed = 0;  // global samples handed out so far
};

class Sampler {
 public:
  // Fails when the stream is too short to hold one window of seq_len + 1 tokens.
  static StatusOr<Sampler> create(size_t num_tokens, int seq_len, uint64_t seed);

  size_t windows() const { return windows_; }
  int seq_len() const { return seq_len_; }
  // Start offset in the stream of global sample i.
  size_t offset(uint64_t sample) const;
  // Fills inputs and targets (each batch * seq_len ints) with the next `batch` samples of this
  // rank's stride and advances the state by batch * world: rank r takes global samples
  // consumed + r, consumed + r + world, ... When sample_ids is given it receives the global
  // index of each sample (batch entries): per-sample randomness (MLM masks) keyed on it is then
  // the same whatever the world size.
  void next_batch(std::span<const int> tokens, int batch, int* inputs, int* targets, int rank = 0,
                  int world = 1, uint64_t* sample_ids = nullptr);

  SamplerState state() const { return state_; }
  void restore(const SamplerState& s);

 private:
  Sampler(size_t windows, int seq_len, uint64_t seed);
  const std::vector<uint32_t>& permutation(uint64_t epoch) const;

  size_t windows_ = 0;
  int seq_len_ = 0;
  SamplerState state_;
  // Cache of the current epoch's permutation.
  mutable uint64_t cached_epoch_ = UINT64_MAX;
  mutable std::vector<uint32_t> perm_;
};

// BERT's masked-LM corruption (Devlin et al. 2019): each position is selected with probability
// 15%; a selected position's target is its original token and its input becomes mask_token
// (80%), a random token in [0, random_vocab) (10%), or stays (10%). Unselected positions get
// target -1 (not scored). `inputs` is modified in place; `targets` (n) is overwritten.
// At least one position per sequence of length seq_len is selected, so no sequence is unscored.
void apply_mlm_masking(int* inputs, int* targets, size_t n, int seq_len, int mask_token,
                       int random_vocab, cann::Rng& rng);

}  // namespace cann::data
