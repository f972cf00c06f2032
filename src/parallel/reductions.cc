// Bucket reductions.
#include "parallel/reductions.h"

#include <algorithm>
#include <cstring>

#include "comm/gloo_reduce.h"

namespace cann::parallel {

Status FullReduction::reduce(const plan::Bucket& bucket, size_t, float* grads) {
  float* g = grads + bucket.begin;
  const size_t n = bucket.size();
  comm::Options opts;
  opts.tag = "grad_bucket";
  if (!bf16_)
    return group_.allreduce(g, n, comm::DataType::kFloat32, comm::ReduceOp::kAvg, opts)
        ->wait(opts.timeout);
  wire_.resize(n);
  comm::bf16_narrow(wire_.data(), g, n, 1.0f);  // bulk conversions: vectorized loops
  CANN_RETURN_IF_ERROR(
      group_.allreduce(wire_.data(), n, comm::DataType::kBFloat16, comm::ReduceOp::kAvg, opts)
          ->wait(opts.timeout));
  comm::bf16_widen(g, wire_.data(), n);
  return OkStatus();
}

// Runs of one kind (dense or expert) inside the bucket, each reduced with one call; alignment
// padding between tensors joins the run it sits in (it is zero everywhere).
Status ExpertAwareReduction::reduce(const plan::Bucket& bucket, size_t, float* grads) {
  comm::Options opts;
  opts.tag = "grad_bucket_ep";
  size_t run_begin = bucket.begin;
  bool run_expert = false, have_run = false;
  auto flush = [&](size_t end) -> Status {
    if (!have_run || end <= run_begin) return OkStatus();
    float* g = grads + run_begin;
    const size_t n = end - run_begin;
    comm::Group& group = run_expert ? expert_dp_ : dp_;
    CANN_RETURN_IF_ERROR(
        group.allreduce(g, n, comm::DataType::kFloat32, comm::ReduceOp::kAvg, opts)->wait());
    if (run_expert)
      for (size_t i = 0; i < n; ++i) g[i] /= static_cast<float>(ep_);
    return OkStatus();
  };
  for (const model::TensorInfo& t : table_.tensors()) {
    const size_t a = std::max(bucket.begin, t.offset);
    const size_t b = std::min(bucket.end, t.offset + t.numel);
    if (a >= b) continue;
    if (!have_run) {
      run_begin = bucket.begin;
      run_expert = t.expert;
      have_run = true;
    } else if (t.expert != run_expert) {
      CANN_RETURN_IF_ERROR(flush(a));
      run_begin = a;
      run_expert = t.expert;
    }
  }
  return flush(bucket.end);
}

TopKReduction::TopKReduction(comm::Group& group, const std::vector<plan::Bucket>& buckets,
                             double ratio)
    : buckets_(buckets) {
  for (const plan::Bucket& b : buckets)
    per_bucket_.push_back(std::make_unique<comm::TopKAllreduce>(group, b.size(), ratio));
}

Status TopKReduction::reduce(const plan::Bucket& bucket, size_t index, float* grads) {
  comm::Options opts;
  opts.tag = "grad_bucket_topk";
  return per_bucket_[index]->run(grads + bucket.begin, opts);
}

void TopKReduction::set_ratio(double ratio) {
  for (auto& b : per_bucket_) b->set_ratio(ratio);
}

void TopKReduction::export_error(float* flat) const {
  for (size_t i = 0; i < buckets_.size(); ++i)
    std::copy(per_bucket_[i]->error().begin(), per_bucket_[i]->error().end(),
              flat + buckets_[i].begin);
}

void TopKReduction::import_error(const float* flat) {
  for (size_t i = 0; i < buckets_.size(); ++i)
    std::copy(flat + buckets_[i].begin, flat + buckets_[i].end, per_bucket_[i]->error().begin());
}

OneBitMomentum::OneBitMomentum(comm::Group& group, const std::vector<plan::Bucket>& buckets,
                               float* m, float beta1)
    : buckets_(buckets), m_(m), beta1_(beta1) {
  for (const plan::Bucket& b : buckets)
    per_bucket_.push_back(std::make_unique<comm::OneBitAllreduce>(group, b.size()));
}

// m = beta1 m + (1 - beta1) g with the local gradient, then the average over ranks through
// the 1-bit all-reduce: Tang et al. 2021, Algorithm 1, lines 7-9.
Status OneBitMomentum::reduce(const plan::Bucket& bucket, size_t index, float* grads) {
  float* m = m_ + bucket.begin;
  const float* g = grads + bucket.begin;
  const size_t n = bucket.size();
  for (size_t i = 0; i < n; ++i) m[i] = beta1_ * m[i] + (1.0f - beta1_) * g[i];
  comm::Options opts;
  opts.tag = "momentum_onebit";
  return per_bucket_[index]->run(m, opts);
}

size_t OneBitMomentum::server_error_floats() const {
  size_t n = 0;
  for (const auto& b : per_bucket_) n += b->server_error().size();
  return n;
}

void OneBitMomentum::export_errors(float* worker_flat, float* server) const {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const auto& w = per_bucket_[i]->worker_error();
    std::copy(w.begin(), w.end(), worker_flat + buckets_[i].begin);
    const auto& s = per_bucket_[i]->server_error();
    server = std::copy(s.begin(), s.end(), server);
  }
}

void OneBitMomentum::import_errors(const float* worker_flat, const float* server) {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    auto& w = per_bucket_[i]->worker_error();
    std::copy(worker_flat + buckets_[i].begin, worker_flat + buckets_[i].end, w.begin());
    auto& s = per_bucket_[i]->server_error();
    std::copy(server, server + s.size(), s.begin());
    server += s.size();
  }
}

void TopKReduction::import_error_resharded(const float* all, int old_world) {
  size_t total = 0;
  for (const plan::Bucket& b : buckets_) total = std::max(total, b.end);
  std::vector<float> mean(total);
  comm::mean_over_ranks(total, old_world, all, mean.data());
  import_error(mean.data());
}

bool OneBitMomentum::import_errors_resharded(const float* worker_all, const float* server_all,
                                             size_t server_all_floats, int old_world, int world,
                                             int rank) {
  size_t n = 0, old_floats = 0;
  for (const plan::Bucket& b : buckets_) {
    n = std::max(n, b.end);
    old_floats += (b.size() + old_world - 1) / old_world;
  }
  if (server_all_floats != old_floats * static_cast<size_t>(old_world)) return false;
  std::vector<float> worker_b, server_b;
  size_t offset = 0;  // of this bucket's server errors in each old rank's run
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const plan::Bucket& b = buckets_[i];
    const size_t count = b.size(), old_chunk = (count + old_world - 1) / old_world;
    worker_b.resize(static_cast<size_t>(old_world) * count);
    server_b.resize(static_cast<size_t>(old_world) * old_chunk);
    for (int r = 0; r < old_world; ++r) {
      std::copy(worker_all + r * n + b.begin, worker_all + r * n + b.end,
                worker_b.begin() + r * count);
      const float* from = server_all + r * old_floats + offset;
      std::copy(from, from + old_chunk, server_b.begin() + r * old_chunk);
    }
    comm::reshard_onebit_errors(count, old_world, worker_b.data(), server_b.data(), world, rank,
                                per_bucket_[i]->worker_error().data(),
                                per_bucket_[i]->server_error().data());
    offset += old_chunk;
  }
  return true;
}

}  // namespace cann::parallel
