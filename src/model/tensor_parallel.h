// What the model needs from its tensor-parallel group: four float collectives over the tp ranks
// (implemented over comm::Group in parallel/, so the model itself stays free of communication
// code), plus the rank's place in the group and whether sequence parallelism is on.
//
// Tensor parallelism (Shoeybi et al. 2019): the attention heads and the MLP's hidden units are
// split over the ranks; column-parallel linears (QKV, first MLP projection) need their input
// whole on every rank, row-parallel ones (attention output, second MLP projection) produce a
// partial sum that is all-reduced (Megatron's g operator; its backward, f, all-reduces the
// input gradient of the column-parallel linear). Sequence parallelism (Korthikanti et al. 2022)
// keeps the residual stream, layernorms and dropout sharded along the tokens between those
// linears: all-gather before the column-parallel linear, reduce-scatter after the row-parallel
// one, and the reverse in backward.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace cann::model {

class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  // In place over the tp ranks.
  virtual Status allreduce_sum(float* data, size_t count) = 0;
  virtual Status allreduce_max(float* data, size_t count) = 0;
  // in (count) -> out (tp * count), rank order; in may be out's own block.
  virtual Status allgather(float* out, const float* in, size_t count) = 0;
  // in (tp * count) summed over ranks -> out (count): block `rank`.
  virtual Status reduce_scatter(float* out, const float* in, size_t count) = 0;
};

struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;
  TensorParallelComm* comm = nullptr;  // required when size > 1; outlives the model
};

// Context parallelism (Megatron-LM's cp in Llama 3's all-gather form; model/context_parallel.cc):
// every sequence is cut into 2*size chunks and rank r holds chunks r and 2*size-1-r, so causal
// attention work is balanced. Everything but attention is per token and runs on the rank's rows;
// attention all-gathers keys and values over the group and reduce-scatters their gradients. The
// collectives are the tensor-parallel interface's, over the cp group.
struct ContextParallel {
  int rank = 0;
  int size = 1;
  TensorParallelComm* comm = nullptr;  // required when size > 1; outlives the model
};

// Expert parallelism (Lepikhin et al. 2020, GShard): the experts of each MoE layer are
// sharded over the ep ranks; tokens go to their experts' rank and back through all-to-alls.
class ExpertParallelComm {
 public:
  virtual ~ExpertParallelComm() = default;
  // in (ep * per_rank) -> out (ep * per_rank): block j goes to rank j.
  virtual Status alltoall_counts(int* out, const int* in, size_t per_rank) = 0;
  // in_counts[j] floats of `in` go to rank j; out_counts[i] floats arrive from rank i.
  virtual Status alltoallv(float* out, const size_t* out_counts, const float* in,
                           const size_t* in_counts) = 0;
};

struct ExpertParallel {
  int rank = 0;
  int size = 1;
  ExpertParallelComm* comm = nullptr;  // required when size > 1; outlives the model
};

}  // namespace cann::model
