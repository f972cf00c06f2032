// Tensor-parallel collectives over a comm::Group.
#include "parallel/tp_comm.h"

#include "comm/group.h"

namespace cann::parallel {

Status GroupTensorParallelComm::allreduce_sum(float* data, size_t count) {
  return group_.allreduce(data, count, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait();
}

Status GroupTensorParallelComm::allreduce_max(float* data, size_t count) {
  return group_.allreduce(data, count, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait();
}

Status GroupTensorParallelComm::allgather(float* out, const float* in, size_t count) {
  return group_.allgather(out, in, count, comm::DataType::kFloat32)->wait();
}

Status GroupTensorParallelComm::reduce_scatter(float* out, const float* in, size_t count) {
  return group_.reduce_scatter(out, in, count, comm::DataType::kFloat32, comm::ReduceOp::kSum)
      ->wait();
}

Status GroupExpertParallelComm::alltoall_counts(int* out, const int* in, size_t per_rank) {
  return group_.alltoall(out, in, per_rank, comm::DataType::kInt32)->wait();
}

Status GroupExpertParallelComm::alltoallv(float* out, const size_t* out_counts, const float* in,
                                          const size_t* in_counts) {
  const size_t P = static_cast<size_t>(group_.size());
  return group_
      .alltoallv(out, std::span<const size_t>(out_counts, P), in,
                 std::span<const size_t>(in_counts, P), comm::DataType::kFloat32)
      ->wait();
}

}  // namespace cann::parallel
