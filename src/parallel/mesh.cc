// Process mesh arithmetic and sub-group construction.
#include "parallel/mesh.h"

#include <cstdio>
#include <iterator>

#include "comm/group.h"

namespace cann::parallel {

MeshShape mesh_shape(const plan::Strategy& s) {
  MeshShape shape;
  shape.dp = s.dp;
  shape.tp = s.tp;
  shape.pp = s.pp;
  shape.ep = s.ep;
  shape.cp = s.cp;
  return shape;
}
namespace {

// Every rank of the mesh whose coordinates match `rank`'s except along the dimension `vary`
// sets, in ascending rank order (rank is increasing in each coordinate).
template <typename Vary>
std::vector<int> ranks_varying(const MeshShape& s, int rank, int extent, Vary vary) {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(extent));
  for (int i = 0; i < extent; ++i) {
    MeshCoords c = mesh_coords(s, rank);
    vary(c, i);
    out.push_back(mesh_rank(s, c));
  }
  return out;
}

}  // namespace

Status check_mesh_shape(const MeshShape& s, int world) {
  if (s.dp < 1 || s.pp < 1 || s.tp < 1 || s.cp < 1 || s.ep < 1)
    return InvalidArgument("process mesh " + describe_mesh_shape(s) +
                           ": every dimension must be at least 1");
  if (s.world() != world)
    return InvalidArgument("process mesh dp*pp*tp*cp = " + std::to_string(s.dp) + "*" +
                           std::to_string(s.pp) + "*" + std::to_string(s.tp) + "*" +
                           std::to_string(s.cp) + " = " + std::to_string(s.world()) + ", but " +
                           std::to_string(world) + " processes were started; hint: launch " +
                           std::to_string(s.world()) + " processes or change the strategy");
  if (s.dp % s.ep != 0)
    return InvalidArgument("process mesh: ep=" + std::to_string(s.ep) +
                           " does not divide dp=" + std::to_string(s.dp) +
                           " (expert groups are carved out of the data-parallel ranks); hint: "
                           "pick an ep that divides dp");
  return OkStatus();
}

MeshCoords mesh_coords(const MeshShape& s, int rank) {
  MeshCoords c;
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.cp = rank % s.cp;
  rank /= s.cp;
  c.dp = rank % s.dp;
  c.pp = rank / s.dp;
  c.ep = c.dp % s.ep;
  c.expert_block = c.dp / s.ep;
  return c;
}

int mesh_rank(const MeshShape& s, const MeshCoords& c) {
  return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp));
}

std::vector<int> tp_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.tp, [](MeshCoords& c, int i) { c.tp = i; });
}
std::vector<int> cp_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.cp, [](MeshCoords& c, int i) { c.cp = i; });
}
std::vector<int> dp_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.dp, [](MeshCoords& c, int i) { c.dp = i; });
}
std::vector<int> dp_cp_group_ranks(const MeshShape& s, int rank) {
  std::vector<int> out;
  for (int d : dp_group_ranks(s, rank))
    for (int c : cp_group_ranks(s, d)) out.push_back(c);
  return out;  // ascending: dp is slower-varying than cp
}
std::vector<int> pp_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.pp, [](MeshCoords& c, int i) { c.pp = i; });
}
// Expert group: dp ranks block*ep .. block*ep + ep - 1.
std::vector<int> ep_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.ep,
                       [&](MeshCoords& c, int i) { c.dp = c.expert_block * s.ep + i; });
}
// Expert-data group: the same place (dp % ep) in every block.
std::vector<int> expert_dp_group_ranks(const MeshShape& s, int rank) {
  return ranks_varying(s, rank, s.dp / s.ep, [&](MeshCoords& c, int i) { c.dp = i * s.ep + c.ep; });
}

std::vector<int> mp_group_ranks(const MeshShape& s, int rank) {
  std::vector<int> out;
  for (int p : pp_group_ranks(s, rank))
    for (int t : tp_group_ranks(s, p)) out.push_back(t);
  return out;  // ascending: pp is slower-varying than tp
}

int pp_prev_rank(const MeshShape& s, int rank) {
  MeshCoords c = mesh_coords(s, rank);
  if (c.pp == 0) return -1;
  --c.pp;
  return mesh_rank(s, c);
}

int pp_next_rank(const MeshShape& s, int rank) {
  MeshCoords c = mesh_coords(s, rank);
  if (c.pp + 1 >= s.pp) return -1;
  ++c.pp;
  return mesh_rank(s, c);
}

std::string describe_mesh_shape(const MeshShape& s) {
  return "dp=" + std::to_string(s.dp) + " pp=" + std::to_string(s.pp) +
         " tp=" + std::to_string(s.tp) + " cp=" + std::to_string(s.cp) +
         " ep=" + std::to_string(s.ep);
}

std::string describe_mesh_ranks(const MeshShape& s) {
  std::string out = "rank  tp cp dp pp ep";
  for (int r = 0; r < s.world(); ++r) {
    const MeshCoords c = mesh_coords(s, r);
    char line[96];
    std::snprintf(line, sizeof(line), "\n%4d %3d %2d %2d %2d %2d", r, c.tp, c.cp, c.dp, c.pp, c.ep);
    out += line;
  }
  return out;
}

ProcessMesh::ProcessMesh(comm::Group& world, const MeshShape& shape)
    : world_(world), shape_(shape), coords_(mesh_coords(shape, world.rank())) {}

ProcessMesh::~ProcessMesh() = default;

int ProcessMesh::rank() const {
  return world_.rank();
}

StatusOr<std::unique_ptr<ProcessMesh>> ProcessMesh::build(comm::Group& world,
                                                          const MeshShape& shape) {
  CANN_RETURN_IF_ERROR(check_mesh_shape(shape, world.size()));
  std::unique_ptr<ProcessMesh> m(new ProcessMesh(world, shape));
  const int r = world.rank();
  const MeshCoords& c = m->coords_;
  // Names are unique per group (they become store prefixes): the kind plus the coordinates
  // that stay fixed inside it.
  const std::string pp = "pp" + std::to_string(c.pp), cp = "cp" + std::to_string(c.cp);
  const std::string dp = "dp" + std::to_string(c.dp), tp = "tp" + std::to_string(c.tp);
  struct Spec {
    std::unique_ptr<comm::Group>* slot;
    std::vector<int> ranks;
    std::string name;
  };
  const Spec specs[] = {
      {&m->tp_, tp_group_ranks(shape, r), "tp-" + pp + "-" + dp + "-" + cp},
      {&m->cp_, cp_group_ranks(shape, r), "cp-" + pp + "-" + dp + "-" + tp},
      {&m->dp_, dp_group_ranks(shape, r), "dp-" + pp + "-" + cp + "-" + tp},
      {&m->ep_, ep_group_ranks(shape, r),
       "ep-" + pp + "-" + cp + "-" + tp + "-b" + std::to_string(c.expert_block)},
      {&m->expert_dp_, expert_dp_group_ranks(shape, r),
       "edp-" + pp + "-" + cp + "-" + tp + "-e" + std::to_string(c.ep)},
      {&m->pp_, pp_group_ranks(shape, r), "pp-" + dp + "-" + cp + "-" + tp},
      {&m->mp_, mp_group_ranks(shape, r), "mp-" + dp + "-" + cp},
  };
  std::vector<Spec> all(std::begin(specs), std::end(specs));
  if (shape.cp > 1)
    all.push_back({&m->dp_cp_, dp_cp_group_ranks(shape, r), "dpcp-" + pp + "-" + tp});
  for (const Spec& s : all) {
    CANN_ASSIGN_OR_RETURN(*s.slot, world.new_subgroup(s.ranks, s.name));
    if (*s.slot == nullptr)
      return Internal("process mesh: rank " + std::to_string(r) + " is not a member of its own " +
                      s.name + " group");
    (*s.slot)->set_name(s.name.substr(0, s.name.find('-')));
  }
  m->pp_prev_ = pp_prev_rank(shape, r);
  m->pp_next_ = pp_next_rank(shape, r);
  return m;
}

std::string ProcessMesh::describe() const {
  const MeshCoords& c = coords_;
  return describe_mesh_shape(shape_) + "; rank " + std::to_string(world_.rank()) + " is tp " +
         std::to_string(c.tp) + ", cp " + std::to_string(c.cp) + ", dp " + std::to_string(c.dp) +
         ", pp " + std::to_string(c.pp) + ", ep " + std::to_string(c.ep);
}

}  // namespace cann::parallel
