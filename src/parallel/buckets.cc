// Bucket planning.
#include "parallel/buckets.h"

#include <algorithm>

namespace cann::parallel {

std::vector<Bucket> plan_buckets(const model::ParamTable& table, size_t first_bucket_bytes,
                                 size_t bucket_bytes) {
  std::vector<Bucket> buckets;
  const size_t total = table.total_floats();
  size_t end = total;
  size_t want = std::max<size_t>(1, first_bucket_bytes / sizeof(float));
  while (end > 0) {
    Bucket b;
    b.end = end;
    b.begin = end > want ? end - want : 0;
    for (const auto& t : table.tensors()) {
      if (t.offset + t.numel <= b.begin || t.offset >= b.end) continue;
      if (std::find(b.layers.begin(), b.layers.end(), t.layer) == b.layers.end())
        b.layers.push_back(t.layer);
    }
    buckets.push_back(std::move(b));
    end = buckets.back().begin;
    want = std::max<size_t>(1, bucket_bytes / sizeof(float));
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

}  // namespace cann::parallel
