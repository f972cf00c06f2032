// ZeRO stage 3 parameter gathering: prefetch, wait, copy into place, release.
#include "parallel/zero_params.h"

#include <algorithm>

#include "core/check.h"
#include "core/pages.h"

namespace cann::parallel {

LayerGatherer::LayerGatherer(std::vector<plan::Bucket> buckets, std::vector<ShardPiece> pieces,
                             comm::Group& group, float* params, const float* shard,
                             const std::vector<int>& blocks)
    : buckets_(std::move(buckets)),
      pieces_(std::move(pieces)),
      group_(group),
      params_(params),
      shard_(shard) {
  CANN_CHECK(buckets_.size() == pieces_.size()) << "one shard piece per bucket";
  int max_layer = -1;
  for (const plan::Bucket& b : buckets_) {
    CANN_CHECK(b.layers.size() == 1) << "ZeRO stage 3 gathers whole layers";
    max_layer = std::max(max_layer, b.layers.front());
  }
  layer_to_bucket_.assign(static_cast<size_t>(max_layer) + 2, -1);
  is_block_.assign(buckets_.size(), false);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const int layer = buckets_[i].layers.front();
    layer_to_bucket_[static_cast<size_t>(layer + 1)] = static_cast<int>(i);
    is_block_[i] = std::find(blocks.begin(), blocks.end(), layer) != blocks.end();
  }
  state_.assign(buckets_.size(), State::kReleased);
  counts_.assign(buckets_.size(), std::vector<size_t>(static_cast<size_t>(group_.size())));
  for (int r = 0; r < group_.size(); ++r) {
    const auto theirs = shard_pieces(buckets_, r, group_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) counts_[b][static_cast<size_t>(r)] = theirs[b].len;
  }
}

LayerGatherer::~LayerGatherer() {
  // A gather still in flight writes into a slot's staging: let it end first.
  for (Slot& s : slots_)
    if (s.work) (void)s.work->wait();
}

int LayerGatherer::bucket_of(int layer) const {
  const size_t i = static_cast<size_t>(layer + 1);
  CANN_CHECK(layer >= -1 && i < layer_to_bucket_.size() && layer_to_bucket_[i] >= 0)
      << "no parameters for layer " << layer;
  return layer_to_bucket_[i];
}

void LayerGatherer::start(int b) {
  if (!status_.ok() || state_[b] != State::kReleased) return;
  Slot* slot = nullptr;
  for (Slot& s : slots_)
    if (s.bucket < 0) slot = &s;
  CANN_CHECK(slot != nullptr) << "more than two layer gathers in flight";
  const ShardPiece& p = pieces_[b];
  slot->bucket = b;
  comm::Options opts;
  opts.tag = "zero3_param_allgather";
  slot->work = group_.allgatherv(params_ + buckets_[b].begin, shard_ + p.shard_offset,
                                 counts_[b], comm::DataType::kFloat32, opts);
  state_[b] = State::kInFlight;
}

void LayerGatherer::finish(int b) {
  if (state_[b] == State::kReleased) start(b);
  if (state_[b] != State::kInFlight) return;
  Slot* slot = nullptr;
  for (Slot& s : slots_)
    if (s.bucket == b) slot = &s;
  CANN_CHECK(slot != nullptr) << "gather of bucket " << b << " has no slot";
  Status s = slot->work->wait();
  if (!s.ok() && status_.ok()) status_ = s;
  slot->work.reset();
  slot->bucket = -1;
  state_[b] = status_.ok() ? State::kResident : State::kReleased;
}

void LayerGatherer::release(int b) {
  if (state_[b] == State::kInFlight) finish(b);  // its slot must not be left pending
  if (state_[b] != State::kResident) return;
  zero_and_release(params_ + buckets_[b].begin, buckets_[b].size() * sizeof(float));
  state_[b] = State::kReleased;
}

void LayerGatherer::begin_forward(int prefetch) {
  if (keep_all_) return;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!is_block_[b]) finish(static_cast<int>(b));
  if (prefetch >= 0) start(bucket_of(prefetch));
}

void LayerGatherer::before(int layer, int prefetch) {
  if (keep_all_) return;
  finish(bucket_of(layer));
  if (prefetch >= 0) start(bucket_of(prefetch));
}

void LayerGatherer::after(int layer) {
  if (keep_all_) return;
  release(bucket_of(layer));
}

void LayerGatherer::invalidate() {
  keep_all_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (state_[b] == State::kInFlight) finish(static_cast<int>(b));
    state_[b] = State::kResident;  // so release() drops it whatever it held
    release(static_cast<int>(b));
  }
}

Status LayerGatherer::gather_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) finish(static_cast<int>(b));
  keep_all_ = status_.ok();
  return status_;
}

size_t LayerGatherer::resident_floats_bound() const {
  size_t kept = 0, first = 0, second = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const size_t n = buckets_[b].size();
    if (!is_block_[b]) {
      kept += n;
    } else if (n > first) {
      second = first;
      first = n;
    } else if (n > second) {
      second = n;
    }
  }
  return kept + first + second;
}

}  // namespace cann::parallel
