// ZeRO stages 1 and 2: shard layout, reduce-scatter reduction, sharded AdamW, parameter all-gather.
#include "parallel/zero.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/pages.h"
#include "kernels/cpu/grad_norm.h"

namespace cann::parallel {

std::vector<ShardPiece> shard_pieces(const std::vector<plan::Bucket>& buckets, int rank,
                                     int world) {
  std::vector<ShardPiece> pieces;
  size_t offset = 0;
  for (const plan::Bucket& b : buckets) {
    ShardPiece p;
    p.padded = (b.size() + world - 1) / world;
    p.flat_begin = std::min(b.end, b.begin + static_cast<size_t>(rank) * p.padded);
    p.len = std::min(b.end, p.flat_begin + p.padded) - p.flat_begin;
    p.shard_offset = offset;
    offset += p.padded;
    pieces.push_back(p);
  }
  return pieces;
}

// Runs on the reducer's thread: the bucket, zero-padded to P pieces, reduce-scattered (average)
// into this rank's gradient shard (stage 1), or added to it after the bucket's range of the
// gradient buffer was released (stage 2, every micro-step).
class ZeroOptimizer::ShardReduction : public BucketReduction {
 public:
  ShardReduction(ZeroOptimizer& z) : z_(z) {}
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override {
    const ShardPiece& p = z_.pieces_[index];
    const size_t P = static_cast<size_t>(z_.group_.size());
    padded_.assign(P * p.padded, 0.0f);
    std::memcpy(padded_.data(), grads + bucket.begin, bucket.size() * sizeof(float));
    comm::Options opts;
    opts.tag = "grad_bucket_reduce_scatter";
    float* shard = z_.grad_shard_.data() + p.shard_offset;
    if (z_.stage_ == 1)  // stages 2 and 3 release the bucket and accumulate
      return z_.group_
          .reduce_scatter(shard, padded_.data(), p.padded, comm::DataType::kFloat32,
                          comm::ReduceOp::kAvg, opts)
          ->wait(opts.timeout);
    zero_and_release(grads + bucket.begin, bucket.size() * sizeof(float));
    received_.resize(p.padded);
    CANN_RETURN_IF_ERROR(z_.group_
                             .reduce_scatter(received_.data(), padded_.data(), p.padded,
                                             comm::DataType::kFloat32, comm::ReduceOp::kAvg, opts)
                             ->wait(opts.timeout));
    for (size_t i = 0; i < p.padded; ++i) shard[i] += received_[i];
    return OkStatus();
  }

 private:
  ZeroOptimizer& z_;
  std::vector<float> padded_, received_;  // reducer thread only
};

ZeroOptimizer::ZeroOptimizer(const model::ParamTable& table, optim::AdamWConfig config,
                             comm::Group& group, const std::vector<plan::Bucket>& buckets,
                             int stage)
    : table_(table), config_(config), group_(group), buckets_(buckets), stage_(stage) {
  CANN_CHECK(stage >= 1 && stage <= 3) << "ZeRO stage " << stage;
  pieces_ = shard_pieces(buckets_, group.rank(), group.size());
  for (const ShardPiece& p : pieces_) shard_floats_ += p.padded;
  grad_shard_.resize(shard_floats_);
  m_.resize(shard_floats_);
  v_.resize(shard_floats_);
  if (stage_ == 3) param_shard_.resize(shard_floats_);
  reduction_ = std::make_unique<ShardReduction>(*this);
}

ZeroOptimizer::~ZeroOptimizer() = default;

BucketReduction* ZeroOptimizer::reduction() {
  return reduction_.get();
}

size_t ZeroOptimizer::staging_floats() const {
  size_t most = 0;
  for (const ShardPiece& p : pieces_) most = std::max(most, p.padded);
  // The reduce-scatter's padded input, under stages 2 and 3 its output, and under stages 1 and
  // 2 the parameter all-gather's output after the step.
  const size_t padded = most * static_cast<size_t>(group_.size());
  return padded + (stage_ >= 2 ? most : 0) + (stage_ <= 2 ? padded : 0);
}

void ZeroOptimizer::set_model_parallel_norm(
    const std::function<bool(const model::TensorInfo&)>& counted,
    std::function<Status(double*)> across) {
  // Each piece is a flat range that may cross tensors: the counted tensors' overlaps, found once.
  norm_ranges_.clear();
  for (const ShardPiece& p : pieces_) {
    const size_t end = p.flat_begin + p.len;
    for (const model::TensorInfo& t : table_.tensors()) {
      const size_t lo = std::max(p.flat_begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (lo < hi && counted(t))
        norm_ranges_.emplace_back(p.shard_offset + (lo - p.flat_begin), hi - lo);
    }
  }
  norm_across_ = std::move(across);
}

Status ZeroOptimizer::with_grad_range(size_t begin, size_t count,
                                      const std::function<Status(float*)>& fn) {
  std::vector<float> range(count, 0.0f);
  // Each overlap of a piece with the range: (range offset, shard offset, length).
  std::vector<std::array<size_t, 3>> mine;
  for (const ShardPiece& p : pieces_) {
    const size_t lo = std::max(begin, p.flat_begin);
    const size_t hi = std::min(begin + count, p.flat_begin + p.len);
    if (lo < hi) mine.push_back({lo - begin, p.shard_offset + (lo - p.flat_begin), hi - lo});
  }
  for (const auto& [at, from, len] : mine)
    std::memcpy(range.data() + at, grad_shard_.data() + from, len * sizeof(float));
  // Every element comes from exactly one rank's piece; the others add zeros.
  CANN_RETURN_IF_ERROR(
      group_.allreduce(range.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum)
          ->wait());
  CANN_RETURN_IF_ERROR(fn(range.data()));
  for (const auto& [at, from, len] : mine)
    std::memcpy(grad_shard_.data() + from, range.data() + at, len * sizeof(float));
  return OkStatus();
}

StatusOr<double> ZeroOptimizer::step(float* params, float lr) {
  // Padding entries of the shard are zero (the padded copies were), so they add nothing. The
  // partial sums travel as the bit patterns of doubles (an int64 all-gather moves bytes
  // unchanged) and are added in rank order, so every rank gets the same norm.
  double sq = 0.0;
  if (!norm_across_) {
    sq = kernels::sum_of_squares(grad_shard_.data(), shard_floats_);
  } else {
    for (const auto& [offset, len] : norm_ranges_)
      sq += kernels::sum_of_squares(grad_shard_.data() + offset, len);
  }
  const size_t P = static_cast<size_t>(group_.size());
  std::vector<double> all(P);
  CANN_RETURN_IF_ERROR(group_.allgather(all.data(), &sq, 1, comm::DataType::kInt64)->wait());
  double total = 0.0;
  for (double v : all) total += v;
  if (norm_across_) CANN_RETURN_IF_ERROR(norm_across_(&total));
  const double norm = std::sqrt(total);
  ++step_;
  const float scale = kernels::clip_coefficient(norm, config_.grad_clip);
  for (const ShardPiece& p : pieces_) {
    if (p.len == 0) continue;
    float* target = stage_ == 3 ? param_shard_.data() + p.shard_offset : params + p.flat_begin;
    optim::adamw_update_range(table_, config_, target, m_.data() + p.shard_offset,
                              v_.data() + p.shard_offset, grad_shard_.data() + p.shard_offset,
                              p.flat_begin, p.len, lr, step_, scale);
  }
  // Stages 2 and 3 accumulate the micro-steps' reductions into the shard: next step from 0.
  if (stage_ >= 2) grad_shard_.zero();
  if (stage_ == 3) return norm;  // layers are gathered from the shard when next needed
  CANN_RETURN_IF_ERROR(allgather_params(params));
  return norm;
}

Status ZeroOptimizer::allgather_params(float* params) {
  const size_t P = static_cast<size_t>(group_.size());
  // The updated pieces back into every rank's parameters, bucket by bucket.
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const ShardPiece& p = pieces_[i];
    const plan::Bucket& b = buckets_[i];
    std::vector<float> mine(p.padded, 0.0f);
    std::memcpy(mine.data(), params + p.flat_begin, p.len * sizeof(float));
    staging_.resize(P * p.padded);
    CANN_RETURN_IF_ERROR(
        group_.allgather(staging_.data(), mine.data(), p.padded, comm::DataType::kFloat32)->wait());
    std::memcpy(params + b.begin, staging_.data(), b.size() * sizeof(float));
  }
  return OkStatus();
}

Status ZeroOptimizer::gather_pieces(float* full, const float* shard) {
  const size_t P = static_cast<size_t>(group_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const ShardPiece& p = pieces_[i];
    staging_.resize(P * p.padded);
    CANN_RETURN_IF_ERROR(
        group_
            .allgather(staging_.data(), shard + p.shard_offset, p.padded, comm::DataType::kFloat32)
            ->wait());
    std::memcpy(full + buckets_[i].begin, staging_.data(), buckets_[i].size() * sizeof(float));
  }
  return OkStatus();
}

void ZeroOptimizer::add_to_param_shard(size_t begin, const float* delta, size_t count) {
  for (const ShardPiece& p : pieces_) {
    const size_t a = std::max(begin, p.flat_begin);
    const size_t b = std::min(begin + count, p.flat_begin + p.len);
    float* shard = param_shard_.data() + p.shard_offset;
    for (size_t i = a; i < b; ++i) shard[i - p.flat_begin] += delta[i - begin];
  }
}

void ZeroOptimizer::load_params(const float* full) {
  param_shard_.zero();
  for (const ShardPiece& p : pieces_)
    std::memcpy(param_shard_.data() + p.shard_offset, full + p.flat_begin, p.len * sizeof(float));
}

Status ZeroOptimizer::gather_params(float* full) {
  return gather_pieces(full, param_shard_.data());
}

Status ZeroOptimizer::gather_state(float* m_full, float* v_full) {
  CANN_RETURN_IF_ERROR(gather_pieces(m_full, m_.data()));
  return gather_pieces(v_full, v_.data());
}

void ZeroOptimizer::load_shards(const float* m, const float* v, const float* param_shard) {
  std::memcpy(m_.data(), m, shard_floats_ * sizeof(float));
  std::memcpy(v_.data(), v, shard_floats_ * sizeof(float));
  if (stage_ == 3 && param_shard != nullptr)
    std::memcpy(param_shard_.data(), param_shard, shard_floats_ * sizeof(float));
}

void ZeroOptimizer::scatter_state(const float* m_full, const float* v_full) {
  m_.zero();
  v_.zero();
  for (const ShardPiece& p : pieces_) {
    std::memcpy(m_.data() + p.shard_offset, m_full + p.flat_begin, p.len * sizeof(float));
    std::memcpy(v_.data() + p.shard_offset, v_full + p.flat_begin, p.len * sizeof(float));
  }
}

}  // namespace cann::parallel
