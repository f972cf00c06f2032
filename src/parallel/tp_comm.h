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

// The model's expert-parallel exchanges over the expert group: counts (alltoall) then rows
// (alltoallv). Cost of an alltoallv moving n floats per rank: P-1 steps, about (P-1)/P * 4n
// bytes sent per rank.
class GroupExpertParallelComm : public model::ExpertParallelComm {
 public:
  explicit GroupExpertParallelComm(comm::Group& group) : group_(group) {}
  Status alltoall_counts(int* out, const int* in, size_t per_rank) override;
  Status alltoallv(float* out, const size_t* out_counts, const float* in,
                   const size_t* in_counts) override;

 private:
  comm::Group& group_;
};

}  // namespace cann::parallel
