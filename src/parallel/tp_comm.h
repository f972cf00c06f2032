// GroupTensorParallelComm: the model's tensor-parallel collectives (model/tensor_parallel.h)
// over a comm::Group, each waited on with the group's default timeout. Costs per call over
// P ranks of n floats (ring algorithms): all-reduce 2(P-1) steps, 2(P-1)/P * 4n bytes;
// all-gather and reduce-scatter (P-1) steps, (P-1) * 4n bytes.
#pragma once

#include "model/tensor_parallel.h"

namespace cann::comm {
class Group;
}

namespace cann::parallel {

class GroupTensorParallelComm : public model::TensorParallelComm {
 public:
  explicit GroupTensorParallelComm(comm::Group& group) : group_(group) {}
  Status allreduce_sum(float* data, size_t count) override;
  Status allreduce_max(float* data, size_t count) override;
  Status allgather(float* out, const float* in, size_t count) override;
  Status reduce_scatter(float* out, const float* in, size_t count) override;

 private:
  comm::Group& group_;
};

}  // namespace cann::parallel
