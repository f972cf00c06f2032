// The resumable distributed sampler and BERT's masked-LM corruption: the two places where
// randomness enters the data path, both drawn from cann::Rng so that a saved state replays
// exactly.
//
// The sampler never stores the epoch permutation in its state: it is a pure function of
// (seed, epoch), recomputed on demand and cached for the epoch in use, so checkpoints hold two
// integers and any world size can resume from them.
#include "data/sampler.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace cann::data {
namespace {

// splitmix64's finalizer (Steele, Lea, Flood 2014): a bijection that scatters nearby inputs.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One seed per (seed, epoch). Mixing the seed before adding the epoch keeps (s, e + 1) and
// (s + 1, e) apart, which a plain seed + epoch would not.
uint64_t epoch_seed(uint64_t seed, uint64_t epoch) {
  return mix64(mix64(seed) + epoch);
}

}  // namespace

StatusOr<Sampler> Sampler::create(size_t num_tokens, int seq_len, uint64_t seed) {
  if (seq_len < 1) {
    return InvalidArgument("sequence length " + std::to_string(seq_len) +
                           " must be at least 1; hint: pass a positive --seq-len");
  }
  const size_t window_tokens = static_cast<size_t>(seq_len) + 1;
  if (num_tokens < window_tokens) {
    return InvalidArgument(
        "the token stream holds " + std::to_string(num_tokens) +
        " tokens, too few for one window of seq_len + 1 = " + std::to_string(window_tokens) +
        "; hint: use a shorter --seq-len or more data");
  }
  const size_t windows = (num_tokens - 1) / static_cast<size_t>(seq_len);
  if (windows > UINT32_MAX) {
    return InvalidArgument("the token stream holds " + std::to_string(windows) +
                           " windows, more than a permutation of uint32 can index; hint: use a "
                           "longer --seq-len or split the data");
  }
  return Sampler(windows, seq_len, seed);
}

Sampler::Sampler(size_t windows, int seq_len, uint64_t seed)
    : windows_(windows), seq_len_(seq_len) {
  state_.seed = seed;
}

const std::vector<uint32_t>& Sampler::permutation(uint64_t epoch) const {
  if (epoch == cached_epoch_) return perm_;
  perm_.resize(windows_);
  for (size_t i = 0; i < windows_; ++i) perm_[i] = static_cast<uint32_t>(i);
  // Fisher-Yates from the top: position i takes a uniform pick among the i + 1 not yet placed.
  Rng rng(epoch_seed(state_.seed, epoch));
  for (size_t i = windows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(i + 1)]);
  cached_epoch_ = epoch;
  return perm_;
}

size_t Sampler::offset(uint64_t sample) const {
  // With W = 10 windows, sample 23 is the 4th entry of epoch 2's permutation.
  const uint64_t epoch = sample / windows_;
  const size_t index = static_cast<size_t>(sample % windows_);
  return static_cast<size_t>(permutation(epoch)[index]) * static_cast<size_t>(seq_len_);
}

void Sampler::next_batch(std::span<const int> tokens, int batch, int* inputs, int* targets,
                         int rank, int world, uint64_t* sample_ids) {
  CANN_CHECK(world >= 1 && rank >= 0 && rank < world)
      << "rank " << rank << " outside a world of " << world;
  CANN_CHECK(batch >= 0) << "batch " << batch;
  const size_t T = static_cast<size_t>(seq_len_);
  for (int j = 0; j < batch; ++j) {
    const uint64_t sample = state_.consumed + static_cast<uint64_t>(rank) +
                            static_cast<uint64_t>(j) * static_cast<uint64_t>(world);
    if (sample_ids != nullptr) sample_ids[j] = sample;
    const size_t off = offset(sample);
    CANN_CHECK(off + T + 1 <= tokens.size())
        << "window at " << off << " runs past a stream of " << tokens.size()
        << " tokens: the sampler was created for a longer stream";
    std::memcpy(inputs + j * T, tokens.data() + off, T * sizeof(int));
    std::memcpy(targets + j * T, tokens.data() + off + 1, T * sizeof(int));
  }
  // Every rank advances by the whole world's batch, so all ranks agree on `consumed` and any
  // one of them can checkpoint it.
  state_.consumed += static_cast<uint64_t>(batch) * static_cast<uint64_t>(world);
}

void Sampler::restore(const SamplerState& s) {
  state_ = s;
  // The cached permutation belongs to the old seed.
  cached_epoch_ = UINT64_MAX;
}

void apply_mlm_masking(int* inputs, int* targets, size_t n, int seq_len, int mask_token,
                       int random_vocab, cann::Rng& rng) {
  CANN_CHECK(seq_len >= 1) << "seq_len " << seq_len;
  CANN_CHECK(random_vocab >= 1) << "random_vocab " << random_vocab;
  constexpr float kSelect = 0.15f, kMask = 0.8f, kRandom = 0.9f;
  for (size_t begin = 0; begin < n; begin += static_cast<size_t>(seq_len)) {
    const size_t end = std::min(n, begin + static_cast<size_t>(seq_len));
    // First pass: choose the scored positions, marking them in targets (token ids are
    // non-negative, so -1 is free to mean "not selected").
    size_t selected = 0;
    for (size_t i = begin; i < end; ++i) {
      const bool pick = rng.uniform() < kSelect;
      targets[i] = pick ? inputs[i] : -1;
      selected += pick ? 1 : 0;
    }
    // A sequence with nothing to predict would add zero to the loss but still count in its mean;
    // with seq_len 128 this happens once in 10^9 sequences, with short sequences often.
    if (selected == 0) {
      const size_t i = begin + static_cast<size_t>(rng.below(end - begin));
      targets[i] = inputs[i];
    }
    // Second pass: corrupt the inputs of the scored positions, 80/10/10.
    for (size_t i = begin; i < end; ++i) {
      if (targets[i] < 0) continue;
      const float u = rng.uniform();
      if (u < kMask) {
        inputs[i] = mask_token;
      } else if (u < kRandom) {
        inputs[i] = static_cast<int>(rng.below(static_cast<uint64_t>(random_vocab)));
      }
    }
  }
}

}  // namespace cann::data
