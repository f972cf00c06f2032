// Embedding bags: each example's bag of ids for one sparse feature pooled (summed or averaged)
// into one vector, the input layer of recommendation models (DLRM, two-tower).
//
// The kernels read rows that a batch has already gathered: `rows` (U,C) holds the batch's
// distinct ids once each (pulled from a local table or a parameter-server shard), and
// `row_index` maps every id of every bag to its row there. So a row that many bags share is
// read once from the table and its gradient is summed once in `drows` before it is pushed.
#pragma once

#include <cstdint>

namespace cann::kernels {

enum class BagPooling { kSum, kMean };

// offsets has B+1 entries: bag b is row_index[offsets[b] - offsets[0] .. offsets[b+1] -
// offsets[0]) (offsets may start anywhere, so one feature's slice of a feature-major CSR array
// is passed as is). rows is (U,C); out row b is at out + b*ldo (ldo >= C), so pooled vectors can
// be written straight into a (B,F,C) stack. An empty bag pools to zeros.
void embedding_bag_forward(float* out, int ldo, const float* rows, const int64_t* offsets,
                           const int32_t* row_index, int B, int C, BagPooling pooling);
// drows (U,C) accumulates; dout row b is at dout + b*ldo.
void embedding_bag_backward(float* drows, const float* dout, int ldo, const int64_t* offsets,
                            const int32_t* row_index, int B, int C, BagPooling pooling);

}  // namespace cann::kernels
