// Bucket planning.
#include "plan/buckets.h"

#include <algorithm>
#include <functional>
#include <map>

namespace cann::plan {

namespace {

// The cuts of a readiness-aligned plan, descending, ending with 0.
std::vector<size_t> ready_cuts(const model::ParamTable& table, size_t first_floats, size_t floats,
                               std::vector<size_t> points) {
  const size_t total = table.total_floats();
  const size_t lowest = *std::min_element(points.begin(), points.end());
  std::map<int, size_t> layer_start;  // what ParamTable::layer_range(l).first gives, in one pass
  for (const auto& t : table.tensors()) {
    auto [it, fresh] = layer_start.emplace(t.layer, t.offset);
    if (!fresh) it->second = std::min(it->second, t.offset);
  }
  for (const auto& [layer, start] : layer_start) points.push_back(start);
  std::sort(points.begin(), points.end(), std::greater<size_t>());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<size_t> cuts;
  size_t end = total, want = first_floats, prev = total;  // prev: the last point passed
  auto cut = [&](size_t at) {
    cuts.push_back(at);
    end = at;
    want = floats;
  };
  for (size_t r : points) {
    if (r >= total || r == 0 || r < lowest) continue;
    if (end - r > want && prev < end) cut(prev);  // one more stretch would pass the size
    prev = r;
    if (r == lowest) cut(r);
  }
  cuts.push_back(0);
  return cuts;
}

}  // namespace

BucketCut cut_buckets(size_t total_floats, const EngineBuckets& sizes) {
  BucketCut c;
  c.first = std::min(total_floats,
                     std::max<size_t>(1, static_cast<size_t>(sizes.first_bytes) / sizeof(float)));
  c.size = std::max<size_t>(
      1, static_cast<size_t>(sizes.size_bytes(static_cast<double>(total_floats))) / sizeof(float));
  const size_t left = total_floats - c.first;
  c.full = left / c.size;
  c.rest = left % c.size;
  return c;
}

std::vector<Bucket> plan_buckets(const model::ParamTable& table, size_t first_bucket_bytes,
                                 size_t bucket_bytes, const std::vector<size_t>& ready) {
  std::vector<Bucket> buckets;
  const size_t total = table.total_floats();
  const BucketCut plain = cut_buckets(
      total, {static_cast<double>(first_bucket_bytes), static_cast<double>(bucket_bytes)});
  std::vector<size_t> cuts;
  if (!ready.empty() && total > 0) cuts = ready_cuts(table, plain.first, plain.size, ready);
  size_t end = total;
  for (size_t i = 0; end > 0; ++i) {
    Bucket b;
    b.end = end;
    const size_t want = i == 0 ? plain.first : plain.size;
    b.begin = !cuts.empty() ? cuts[i] : end > want ? end - want : 0;
    for (const auto& t : table.tensors()) {
      if (t.offset + t.numel <= b.begin || t.offset >= b.end) continue;
      if (std::find(b.layers.begin(), b.layers.end(), t.layer) == b.layers.end())
        b.layers.push_back(t.layer);
    }
    buckets.push_back(std::move(b));
    end = buckets.back().begin;
  }
  return buckets;
}

std::vector<Bucket> plan_layer_buckets(const model::ParamTable& table) {
  // Tensors start on aligned offsets: a layer's bucket runs up to where the next layer starts,
  // so the alignment gaps belong to the layer before them and the buckets tile the buffer.
  std::vector<Bucket> buckets;  // in flat order first, reversed at the end
  for (const auto& t : table.tensors()) {
    if (!buckets.empty() && buckets.back().layers.front() == t.layer) continue;
    for (const Bucket& b : buckets)
      if (b.layers.front() == t.layer) return {};  // the layer was interrupted
    Bucket b;
    b.begin = buckets.empty() ? 0 : t.offset;
    if (!buckets.empty()) buckets.back().end = t.offset;
    b.layers = {t.layer};
    buckets.push_back(std::move(b));
  }
  if (buckets.empty()) return {};
  buckets.back().end = table.total_floats();
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

}  // namespace cann::plan
