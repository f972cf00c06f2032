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

}  // namespace cann::parallel
