// A rank's training and evaluation micro-batches (see batch_source.h).
#include "train/batch_source.h"

#include <cstring>

#include "data/tokenizer.h"

namespace cann::train {

BatchSource::BatchSource(const TrainConfig& config, const model::ModelSpec& spec,
                         const RunLayout& layout)
    : seed_(config.seed),
      bert_(spec.architecture == model::Architecture::kBert),
      vocab_size_(spec.vocab_size),
      micro_batch_(layout.micro_batch()),
      seq_len_(layout.seq_len),
      accum_steps_(layout.accum_steps),
      global_batch_(layout.global_batch()),
      data_rank_(layout.data_rank),
      data_world_(layout.data_world),
      inputs_(static_cast<size_t>(micro_batch_) * seq_len_),
      targets_(inputs_.size()),
      sample_ids_(micro_batch_) {}

StatusOr<std::unique_ptr<BatchSource>> BatchSource::open(const TrainConfig& config,
                                                         const model::ModelSpec& spec,
                                                         const RunLayout& layout) {
  std::unique_ptr<BatchSource> b(new BatchSource(config, spec, layout));
  CANN_ASSIGN_OR_RETURN(b->data_, data::load_dataset(config.data));
  const data::Dataset& d = b->data_;
  // BERT's [MASK] is the last vocabulary id, so data ids must stay below it.
  const int id_limit = b->bert_ ? spec.vocab_size - 1 : spec.vocab_size;
  if (d.max_token >= id_limit)
    return InvalidArgument("data '" + config.data + "' holds token id " +
                           std::to_string(d.max_token) + " but model '" + spec.name +
                           "' accepts ids below " + std::to_string(id_limit) +
                           (b->bert_ ? " (the last id is [MASK])" : "") +
                           "; hint: pick a model whose vocab_size covers the data");
  CANN_ASSIGN_OR_RETURN(data::Sampler sampler,
                        data::Sampler::create(d.train.size(), layout.seq_len, config.seed));
  b->sampler_.emplace(std::move(sampler));
  if (d.val.size() < static_cast<size_t>(layout.seq_len) + 1)
    return InvalidArgument("validation split of '" + config.data + "' has " +
                           std::to_string(d.val.size()) + " tokens, fewer than one sequence of " +
                           std::to_string(layout.seq_len + 1) +
                           "; hint: use more data or a shorter --seq-len");
  b->rng_.reseed(config.seed ^ 0x5eedf00dULL);
  return b;
}

void BatchSource::next() {
  sampler_->next_batch(data_.train, micro_batch_, inputs_.data(), targets_.data(), data_rank_,
                       data_world_, sample_ids_.data());
  mask(inputs_.data(), targets_.data(), sample_ids_.data(), micro_batch_);
}

void BatchSource::eval_batch(int b, int k, int* in, int* tg) const {
  const int B = micro_batch_, T = seq_len_;
  const size_t windows = (data_.val.size() - 1) / T;
  std::vector<uint64_t> ids(B);
  for (int i = 0; i < B; ++i) {
    const uint64_t sample = static_cast<uint64_t>(b) * global_batch_ + data_rank_ +
                            static_cast<uint64_t>(k * B + i) * data_world_;
    const size_t w = sample % windows;
    ids[i] = ~sample;  // a key space apart from the training samples'
    std::memcpy(&in[static_cast<size_t>(i) * T], &data_.val[w * T], sizeof(int) * T);
    std::memcpy(&tg[static_cast<size_t>(i) * T], &data_.val[w * T + 1], sizeof(int) * T);
  }
  mask(in, tg, ids.data(), B);
}

void BatchSource::mask(int* inputs, int* targets, const uint64_t* sample_ids, int count) const {
  if (!bert_) return;
  const int random_vocab = data_.byte_level ? data::kByteVocab : vocab_size_ - 1;
  for (int i = 0; i < count; ++i) {
    Rng rng(seed_ * 0x9e3779b97f4a7c15ULL + sample_ids[i]);
    const size_t off = static_cast<size_t>(i) * seq_len_;
    data::apply_mlm_masking(inputs + off, targets + off, seq_len_, seq_len_, vocab_size_ - 1,
                            random_vocab, rng);
  }
}

void BatchSource::restore(const data::SamplerState& sampler, const std::array<uint64_t, 4>& rng) {
  sampler_->restore(sampler);
  rng_.set_state(rng);
}

void BatchSource::restart() {
  sampler_->restore(data::SamplerState{seed_, 0});
  rng_.reseed(seed_ ^ 0x5eedf00dULL);
}

}  // namespace cann::train
