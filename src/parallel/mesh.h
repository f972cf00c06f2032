// ProcessMesh: the ranks of a job arranged as a grid dp x pp x tp x cp, with the expert groups
// carved out of data parallel, and the communication sub-groups of each rank built once.
//
// Order (Megatron-LM's default): tensor-parallel fastest, then context, then data, then
// pipeline:
//
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//
// so the ranks of a tensor group are consecutive (they share a node whenever tp divides the
// devices per node) and a pipeline stage is a contiguous block of tp*cp*dp ranks. Example:
// tp=2, dp=2, pp=2 on 8 ranks: rank 5 = 1 + 2*(0 + 1*(0 + 2*1)) is tp_rank 1, dp_rank 0,
// pp_rank 1; its tensor group is {4,5}, its data group {5,7}, its pipeline neighbours 1 and
// (none: last stage).
//
// Expert groups (as in Megatron): the dp ranks of one (pp, cp, tp) position are cut into
// consecutive blocks of ep; a block is an expert group (the experts are sharded over it), and
// the ranks at the same place in every block form the expert-data group that averages the
// gradients of the same expert shard. ep divides dp.
//
// Pipeline neighbours talk point to point over the world group; the pipeline group (all stages
// of one place) carries the tied embedding's gradient sum, the model-parallel group (tp x pp)
// the gradient norm. The ranks of a context group hold the same parameters and different
// positions of the same sequences, so dense gradients are summed over data x context ranks
// (Megatron's dp-cp group): with cp = 1 that group is the data-parallel group itself. Sub-groups of
// size 1 are built like the others, so code never special-cases them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/strategy.h"

namespace cann::comm {
class Group;
}

namespace cann::parallel {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1, cp = 1, ep = 1;
  int world() const { return dp * pp * tp * cp; }
};

// The mesh of a resolved strategy (dp set).
MeshShape mesh_shape(const plan::Strategy& s);

struct MeshCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0;            // rank inside the expert group: dp % ep
  int expert_block = 0;  // which expert group of the data-parallel ranks: dp / ep
};

// Checks that every dimension is positive, that they multiply to `world` and that ep divides
// dp. The error names the numbers that disagree and what to change.
Status check_mesh_shape(const MeshShape& shape, int world);

MeshCoords mesh_coords(const MeshShape& shape, int rank);
int mesh_rank(const MeshShape& shape, const MeshCoords& c);

// The world ranks of each group `rank` belongs to, ascending (the rank itself included).
std::vector<int> tp_group_ranks(const MeshShape& shape, int rank);
std::vector<int> cp_group_ranks(const MeshShape& shape, int rank);
std::vector<int> dp_group_ranks(const MeshShape& shape, int rank);
// Every (cp, dp) place at this rank's (tp, pp): the gradient-reduction group.
std::vector<int> dp_cp_group_ranks(const MeshShape& shape, int rank);
std::vector<int> pp_group_ranks(const MeshShape& shape, int rank);
std::vector<int> ep_group_ranks(const MeshShape& shape, int rank);
std::vector<int> expert_dp_group_ranks(const MeshShape& shape, int rank);
// Model-parallel group: the tp x pp ranks that hold one replica's (and context shard's) model.
std::vector<int> mp_group_ranks(const MeshShape& shape, int rank);
// The previous / next pipeline stage's rank at the same (tp, cp, dp) place; -1 at the ends.
int pp_prev_rank(const MeshShape& shape, int rank);
int pp_next_rank(const MeshShape& shape, int rank);

// "dp=2 pp=1 tp=2 cp=1 ep=1", and a table with one line per rank of its coordinates.
std::string describe_mesh_shape(const MeshShape& shape);
std::string describe_mesh_ranks(const MeshShape& shape);

class ProcessMesh {
 public:
  // A collective over `world`: every rank builds its tensor, context, data, expert,
  // expert-data, pipeline and model-parallel groups, then with cp > 1 the data x context group
  // (in that order on every rank, so no two ranks wait on each other in different groups). `world`
  // must outlive the mesh.
  static StatusOr<std::unique_ptr<ProcessMesh>> build(comm::Group& world, const MeshShape& shape);
  ~ProcessMesh();

  const MeshShape& shape() const { return shape_; }
  const MeshCoords& coords() const { return coords_; }
  int rank() const;
  comm::Group& world() { return world_; }
  comm::Group& tp() { return *tp_; }
  comm::Group& cp() { return *cp_; }
  comm::Group& dp() { return *dp_; }
  comm::Group& dp_cp() { return shape_.cp > 1 ? *dp_cp_ : *dp_; }
  comm::Group& ep() { return *ep_; }
  comm::Group& expert_dp() { return *expert_dp_; }
  comm::Group& pp() { return *pp_; }
  comm::Group& mp() { return *mp_; }
  int pp_prev() const { return pp_prev_; }
  int pp_next() const { return pp_next_; }
  // One line: shape and this rank's coordinates.
  std::string describe() const;

 private:
  ProcessMesh(comm::Group& world, const MeshShape& shape);

  comm::Group& world_;
  MeshShape shape_;
  MeshCoords coords_;
  std::unique_ptr<comm::Group> tp_, cp_, dp_, ep_, expert_dp_, pp_, mp_;
  std::unique_ptr<comm::Group> dp_cp_;  // built only with cp > 1
  int pp_prev_ = -1, pp_next_ = -1;
};

}  // namespace cann::parallel
