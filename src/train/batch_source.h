// BatchSource: where a rank's sequences come from. It owns the dataset, the resumable sampler
// over its training stream, BERT's masked-LM corruption and the evaluation windows, and hands
// out one micro-batch at a time in the layout's shape (micro_batch x seq_len token ids and
// targets).
//
// Training: micro-batch after micro-batch of this data rank's stride through the global batch
// (the sampler's rank r of data_world takes global samples consumed + r, + r + data_world,
// ...). Evaluation: the first eval_batches * global_batch windows of the validation stream,
// split over the data ranks the same way, identical at every evaluation (and for BERT masked
// identically), so evaluations are comparable. Masks come from an RNG keyed on (seed, global
// sample index): a sample is masked the same way whichever rank trains it and whatever the
// world size.
//
// Thread safety: one thread (the training loop).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "model/spec.h"
#include "train/config.h"
#include "train/run_layout.h"

namespace cann::train {

class BatchSource {
 public:
  // Loads --data and checks it against the model (token ids below its vocabulary, a
  // validation split of at least one sequence).
  static StatusOr<std::unique_ptr<BatchSource>> open(const TrainConfig& config,
                                                     const model::ModelSpec& spec,
                                                     const RunLayout& layout);

  // The next training micro-batch of this rank into inputs() and targets().
  void next();
  const int* inputs() const { return inputs_.data(); }
  const int* targets() const { return targets_.data(); }

  // Evaluation micro-batch k (of accum_steps) of validation batch b (of eval_batches) into
  // in and tg, each micro_batch x seq_len.
  void eval_batch(int b, int k, int* in, int* tg) const;

  const data::Dataset& data() const { return data_; }
  int64_t samples_consumed() const { return static_cast<int64_t>(sampler_->state().consumed); }

  // For checkpoints: the sampler's position and the run's RNG.
  data::SamplerState sampler_state() const { return sampler_->state(); }
  std::array<uint64_t, 4> rng_state() const { return rng_.state(); }
  void restore(const data::SamplerState& sampler, const std::array<uint64_t, 4>& rng);
  // Back to the first sample, as a fresh run starts.
  void restart();

 private:
  BatchSource(const TrainConfig& config, const model::ModelSpec& spec, const RunLayout& layout);
  void mask(int* inputs, int* targets, const uint64_t* sample_ids, int count) const;

  data::Dataset data_;
  std::optional<data::Sampler> sampler_;
  Rng rng_;
  uint64_t seed_;
  bool bert_;
  int vocab_size_;
  int micro_batch_, seq_len_, accum_steps_, global_batch_;
  int data_rank_, data_world_;
  std::vector<int> inputs_, targets_;
  std::vector<uint64_t> sample_ids_;
};

}  // namespace cann::train
