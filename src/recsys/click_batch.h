// ClickBatch: the one batch layout every recommendation data source fills (the Criteo reader,
// the synthetic generator) and every recommendation model reads, so models never see where the
// impressions came from.
//
// Sparse features are stored feature-major in CSR form: with B rows and F sparse features, bag
// (b, f) is ids[offsets[f*B + b] .. offsets[f*B + b + 1]). One table's bags are then one
// contiguous run of `offsets`, which is what an embedding-bag lookup per table wants. Example:
// B = 2, F = 2, every bag one id: offsets = {0, 1, 2, 3, 4}, ids = {u0, u1, i0, i1}, where u
// are feature 0's ids for rows 0 and 1 and i are feature 1's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cann::recsys {

// One batch of impressions: B rows, each with D dense features, and for each of F sparse
// features a bag of ids, and a 0/1 label.
struct ClickBatch {
  int batch = 0, dense_features = 0, sparse_features = 0;
  std::vector<float> dense;       // (B, D)
  std::vector<int64_t> offsets;   // (F*B + 1)
  std::vector<int64_t> ids;       // raw ids (hashed into a table's rows by the model)
  std::vector<float> labels;      // (B), 0 or 1
  std::vector<float> click_prob;  // (B) the planted probability when known (synthetic), else empty
  // Two-tower: ids in features [0, user_features) describe the user, the rest the item.

  // Sizes every buffer for `rows` rows of one id per bag (offsets = 0, 1, ..., F*B), the layout
  // of both readers; `with_click_prob` sizes click_prob too, else empties it.
  void resize_one_id_per_bag(int rows, int dense_count, int sparse_count, bool with_click_prob) {
    batch = rows;
    dense_features = dense_count;
    sparse_features = sparse_count;
    const int64_t bags = static_cast<int64_t>(rows) * sparse_count;
    dense.resize(static_cast<size_t>(rows) * dense_count);
    offsets.resize(bags + 1);
    for (int64_t k = 0; k <= bags; ++k) offsets[k] = k;
    ids.resize(bags);
    labels.resize(rows);
    click_prob.resize(with_click_prob ? rows : 0);
  }

  // Bag (b, f) as [begin, end) into ids.
  int64_t bag_begin(int b, int f) const { return offsets[static_cast<int64_t>(f) * batch + b]; }
  int64_t bag_end(int b, int f) const { return offsets[static_cast<int64_t>(f) * batch + b + 1]; }
};

}  // namespace cann::recsys
