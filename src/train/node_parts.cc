// Multi-node elastic under model parallelism: snapshots of each rank's part, with a copy on the
// next node where no other node holds the same part, assembled into the whole state when the
// world changes (RunState::node_parts).
//
// Every rank's snapshot holds its own buffers in its own layout (parameters and both moments,
// ZeRO's gathered over its data-parallel group) and, in its metadata ("node_parts"), where they
// land in the whole model: per kind (dense tensors, experts) the runs of the elements it holds
// on behalf of every rank that holds the same (ModelParts::replica_runs, a few strided groups a
// tensor). Ranks with equal runs form a replica class (its data-parallel, context-parallel and
// expert-data-parallel replicas): synchronous training keeps their values equal, so any one of
// them serves for all. Once per layout the ranks compare their runs (plan_node_parts) and
// record every rank's class; a class whose ranks all live on one node has its lowest rank send
// the same bytes as its snapshot to the rank of the same place on the next node (rank + ranks
// per node, around the ring), which keeps them in its node's directory of the generation; where
// only some of its kinds need it (the experts, when data parallelism keeps the dense tensors on
// every node), the copy carries just those elements, packed, with their runs. So every part
// lives on two nodes, and any one node lost leaves every part somewhere; a part that data
// parallelism already keeps on two nodes (dp across nodes beside tp within them) costs no copy
// at all, and the rest cost their elements once over the network per snapshot, where a
// whole-model snapshot all-reduces the whole state (3 full models) on every rank.
//
// A new generation (a node lost, joined, or scaled) restores from them: the ranks agree on the
// generation, on its classes, on its step (the oldest of the classes' newest), and on which
// rank places each class (the first at or after its leader, around the new world, that holds a
// part of it which verifies); every rank places the parts it was given into a zeroed whole
// model and one all-reduce sums them, after which each holds the whole state and loads its own
// part of the new layout from it, as from a disk checkpoint. The step's sampler position, RNG
// and step-log line come from the part that placed old rank 0's class, broadcast by whoever
// placed it.
//
// Not survivable from memory: losing every node a class lives on, that is two neighbouring
// nodes together for a class on one node (node i and i + 1 hold its only copies; with two
// nodes, both), or a part whose copies all fail to verify. Every rank then loads the newest
// disk checkpoint (else starts over), alike, and says which rank's part was lost.
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/replicas.h"
#include "ckpt/snapshot_writer.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/state_keeper.h"
#include "train/train_state.h"

namespace cann::train {
namespace {

constexpr auto kPartsWait =
    std::chrono::hours(24);  // p2p and collectives fail on their own timeout
// What a copy may hold, a bound on what a peer's header may claim.
constexpr size_t kMaxSections = 64;
// Copies of another rank's snapshots kept, as many as of a rank's own.
constexpr int kNodeCopiesKept = 2;

// The sections' names and sizes and the metadata of a snapshot, as one JSON text.
std::string header_of(const ckpt::CheckpointWrite& w) {
  nlohmann::json h;
  h["step"] = w.step;
  h["meta"] = w.meta_json;
  nlohmann::json sections = nlohmann::json::array();
  for (const ckpt::SectionView& s : w.sections) sections.push_back({s.name, s.bytes});
  h["sections"] = sections;
  return h.dump();
}

// Appends `text` to `words` as 4-byte words (what the transport moves), zero-padded; returns
// how many words it took.
size_t append_words(const std::string& text, std::vector<int32_t>& words) {
  const size_t at = words.size(), n = (text.size() + 3) / 4;
  words.resize(at + n, 0);
  if (!text.empty()) std::memcpy(words.data() + at, text.data(), text.size());
  return n;
}

// A JSON array of integers.
std::string int_array(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out.append(i == 0 ? "" : ",").append(std::to_string(v[i]));
  return out + "]";
}

}  // namespace

StatusOr<std::string> StateKeeper::plan_node_parts() {
  comm::Group* world = run_.world;
  const int W = world != nullptr ? world->size() : 1, L = local_world_;
  const ModelParts& model = *run_.model;
  const std::vector<int64_t> runs[2] = {model.replica_runs(false), model.replica_runs(true)};
  // Every rank's runs, by a 64-bit FNV-1a digest (0: none of that kind): equal runs land on the
  // same elements, so the ranks with equal digests hold equal values, one class.
  int64_t mine[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    if (runs[k].empty()) continue;
    uint64_t h = 1469598103934665603ull;
    for (const int64_t v : runs[k]) {
      for (int b = 0; b < 8; ++b) {
        h ^= (static_cast<uint64_t>(v) >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    }
    mine[k] = static_cast<int64_t>(h | 1);
  }
  std::vector<int64_t> digests(2 * static_cast<size_t>(W), 0);
  if (world != nullptr) {
    comm::Options opts;
    opts.tag = "parts_plan";
    if (Status s = world->allgather(digests.data(), mine, 2, comm::DataType::kInt64, opts)
                       ->wait(kPartsWait);
        !s.ok())
      return run_.on_comm_failure(s);
  } else {
    digests.assign(mine, mine + 2);
  }
  // Per kind, each rank's class leader (the lowest rank with its digest) and whether the class
  // has ranks on more than one node. A class on one node only sends its leader's part to the
  // next node, the one place a loss of its node leaves it; a class on two nodes or more
  // survives any one node's loss in its ranks' own snapshots (Gemini, Wang et al. 2023, places
  // replicas across failure domains the same way; here data parallelism already made them).
  std::vector<int64_t> leaders(2 * static_cast<size_t>(W), -1);
  bool sent[2] = {false, false};  // this rank's kinds that its copy carries
  node_sends_.assign(static_cast<size_t>(W), 0);
  copy_.exchange.reset();       // the copies' sizes are asked for again under the new plan
  int classes = 0, copied = 0;  // classes, and those on one node (their leader sends a copy)
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < W; ++r) {
      const int64_t d = digests[2 * r + k];
      if (d == 0) continue;
      int leader = r;
      bool spread = false;
      for (int q = 0; q < W; ++q) {
        if (digests[2 * q + k] != d) continue;
        leader = std::min(leader, q);
        spread = spread || q / L != r / L;
      }
      leaders[static_cast<size_t>(k) * W + r] = leader;
      if (leader != r) continue;
      ++classes;
      if (!spread && W > L && W % L == 0) {
        node_sends_[r] = 1;
        ++copied;
        if (r == rank_) sent[k] = true;
      }
    }
  }
  if (rank_ == 0) {
    const std::string held = std::to_string(W) + " ranks hold " + std::to_string(classes) +
                             " distinct parts (dense and expert)";
    event("snapshot_plan", W <= L || W % L != 0
                               ? held + " on one node: no copies"
                               : held + ": " + std::to_string(classes - copied) +
                                     " on more than one node, " + std::to_string(copied) +
                                     " copied to the next node at each snapshot");
  }
  // A copy carrying only some of the rank's kinds (the experts, where data parallelism keeps
  // the dense tensors on every node) holds just their elements, packed: the runs to pack, and
  // the runs of the packed part in its metadata.
  node_pack_.clear();
  node_copy_runs_.clear();
  if (node_sends_[rank_] != 0 &&
      ((!runs[0].empty() && !sent[0]) || (!runs[1].empty() && !sent[1]))) {
    int64_t at = 0;
    std::vector<int64_t> packed[2];
    for (int k = 0; k < 2; ++k) {
      if (!sent[k]) continue;
      for (size_t g = 0; g + 6 <= runs[k].size(); g += 6) {
        const int64_t* r = &runs[k][g];
        node_pack_.insert(node_pack_.end(), r, r + 6);
        packed[k].insert(packed[k].end(), {at, r[1], r[2], r[3], r[2], r[5]});
        at += r[2] * r[3];
      }
    }
    node_copy_runs_ = "[" + int_array(packed[0]) + "," + int_array(packed[1]) + "]";
  }
  return "\"node_parts\":{\"world\":" + std::to_string(W) +
         ",\"full_floats\":" + std::to_string(model.full_table().total_floats()) + ",\"runs\":[" +
         int_array(runs[0]) + "," + int_array(runs[1]) + "],\"leaders\":" + int_array(leaders) +
         "}";
}

Status StateKeeper::start_copy_to_next_node(const ckpt::CheckpointWrite& w) {
  comm::Group* world = run_.world;
  const int W = world != nullptr ? world->size() : 1, L = local_world_;
  if (W <= L || W % L != 0) return OkStatus();  // one node: its own copies are all there is
  if (std::find(node_sends_.begin(), node_sends_.end(), 1) == node_sends_.end())
    return OkStatus();  // every part lives on two nodes already
  const int to = (rank_ + L) % W, from = (rank_ - L + W) % W;
  const bool sends = node_sends_[rank_] != 0, receives = node_sends_[from] != 0;
  comm::Options opts;
  opts.tag = "snapshot_copy";
  auto failed = [this](const Status& s) { return run_.on_comm_failure(s); };
  // One exchange over the world, each sending rank's words to one rank: a collective, so that
  // a peer lost meanwhile fails it on every rank as promptly as the step's own collectives.
  std::vector<int32_t>& out = copy_.out;
  out.assign(NodeCopyExchange::kPrefixWords, 0);
  size_t header_words = 0;
  if (sends) {
    // The parameters and moments whole, or packed to the kinds the copy carries (the plan's
    // runs); every other section whole.
    const bool packed = !node_pack_.empty();
    auto is_state = [](const std::string& name) {
      return name == "params" || name == "adam_m" || name == "adam_v";
    };
    ckpt::CheckpointWrite sent = w;
    if (packed) {
      size_t floats = 0;
      for (size_t g = 0; g + 6 <= node_pack_.size(); g += 6)
        floats += static_cast<size_t>(node_pack_[g + 2] * node_pack_[g + 3]);
      for (ckpt::SectionView& s : sent.sections)
        if (is_state(s.name)) s.bytes = floats * sizeof(float);
      try {
        nlohmann::json meta = nlohmann::json::parse(w.meta_json);
        meta.at("node_parts")["runs"] = nlohmann::json::parse(node_copy_runs_);
        sent.meta_json = meta.dump();
      } catch (const std::exception& e) {
        return Internal(std::string("snapshot metadata without its parts: ") + e.what());
      }
    }
    header_words = append_words(header_of(sent), out);
    for (const ckpt::SectionView& s : w.sections) {
      if (s.bytes % 4 != 0)
        return Internal("snapshot section " + s.name + " is not a whole number of words");
      if (packed && is_state(s.name)) {
        const float* from_buf = static_cast<const float*>(s.data);
        const size_t floats = s.bytes / sizeof(float);
        for (size_t g = 0; g + 6 <= node_pack_.size(); g += 6) {
          const int64_t* r = &node_pack_[g];
          for (int64_t j = 0; j < r[3]; ++j) {
            const size_t first = static_cast<size_t>(r[0] + j * r[4]);
            if (first + static_cast<size_t>(r[2]) > floats)
              return Internal("snapshot section " + s.name + " is shorter than its runs");
            const size_t at = out.size();
            out.resize(at + static_cast<size_t>(r[2]));
            std::memcpy(out.data() + at, from_buf + first, static_cast<size_t>(r[2]) * 4);
          }
        }
        continue;
      }
      const size_t at = out.size();
      out.resize(at + s.bytes / 4);
      if (s.bytes > 0) std::memcpy(out.data() + at, s.data, s.bytes);
    }
  }
  if (Status s = copy_.exchange.start(*world, to, from, sends, receives, out, header_words,
                                      copy_.in, opts, kPartsWait);
      !s.ok())
    return failed(s);
  return OkStatus();
}

Status StateKeeper::finish_copy_to_next_node() {
  if (!copy_.exchange.under_way()) return OkStatus();
  if (Status s = copy_.exchange.finish(kPartsWait); !s.ok()) return run_.on_comm_failure(s);
  const int from = copy_.exchange.received_from();
  if (from < 0) return OkStatus();
  const std::vector<int32_t>& in = copy_.in;
  auto failed = [this](const Status& s) { return run_.on_comm_failure(s); };
  ckpt::CheckpointWrite copy;
  try {
    const size_t header_at = NodeCopyExchange::kPrefixWords;
    const size_t header_in = static_cast<size_t>(copy_.exchange.received_header_words());
    std::string text(reinterpret_cast<const char*>(in.data() + header_at), header_in * 4);
    text.resize(std::strlen(text.c_str()));  // the words' padding
    const nlohmann::json h = nlohmann::json::parse(text);
    copy.step = h.at("step").get<int64_t>();
    copy.meta_json = h.at("meta").get<std::string>();
    size_t at = header_at + header_in;
    for (const auto& e : h.at("sections")) {
      const size_t bytes = e.at(1).get<size_t>();
      if (bytes % 4 != 0 || at + bytes / 4 > in.size())
        throw std::runtime_error("sections beyond the copy");
      copy.sections.push_back({e.at(0).get<std::string>(), in.data() + at, bytes});
      at += bytes / 4;
    }
    if (copy.sections.size() > kMaxSections) throw std::runtime_error("too many sections");
  } catch (const std::exception& e) {
    return failed(DataLoss("rank " + std::to_string(from) + " sent a malformed snapshot copy (" +
                           e.what() + ")"));
  }
  // Kept as the sender's copy in this node's directory of the generation; a copy that cannot be
  // written leaves the older ones, as the rank's own snapshots do.
  const std::string dir = join_path(snapshot_root_, "rank" + std::to_string(from));
  std::unique_ptr<ckpt::SnapshotWriter>& writer = copy_writers_[dir];
  Status s = OkStatus();
  if (!writer) {
    s = make_dirs(dir);
    if (s.ok()) writer = std::make_unique<ckpt::SnapshotWriter>(dir, kNodeCopiesKept);
  }
  if (s.ok()) s = writer->write(copy).status();
  if (!s.ok())
    log_warning("rank " + std::to_string(rank_) + ": copy of rank " + std::to_string(from) +
                "'s snapshot: " + s.message());
  return OkStatus();
}

std::vector<StateKeeper::NodeCopy> StateKeeper::node_copies() const {
  std::vector<NodeCopy> out;
  for (const ckpt::SnapshotCopy& c : ckpt::list_node_snapshots(node_snapshots_)) {
    NodeCopy copy;
    copy.step = c.step;
    copy.generation = c.generation;
    copy.path = c.path;
    StatusOr<std::string> meta = ckpt::read_checkpoint_meta(c.path);
    if (!meta.ok()) continue;  // damaged: not offered
    if (const auto mark = ckpt::rank_snapshot_mark(*meta)) {
      const nlohmann::json m = nlohmann::json::parse(*meta, nullptr, false);
      if (m.is_discarded() || !m.contains("node_parts")) continue;  // not a node part
      copy.rank = mark->rank;
      const nlohmann::json& parts = m["node_parts"];
      copy.world = parts.value("world", int64_t{0});
      const auto leaders = parts.find("leaders");
      if (leaders == parts.end() || !leaders->is_array() ||
          leaders->size() != 2 * static_cast<size_t>(std::max<int64_t>(copy.world, 0)))
        continue;  // not readable as a part
      for (const auto& v : *leaders) {
        if (!v.is_number_integer()) break;
        copy.leaders.push_back(v.get<int64_t>());
      }
      if (copy.leaders.size() != leaders->size()) continue;
      // The kinds whose elements it carries (a packed copy may carry only some).
      const auto runs = parts.find("runs");
      if (runs == parts.end() || !runs->is_array() || runs->size() != 2) continue;
      for (int k = 0; k < 2; ++k)
        if (!(*runs)[k].empty()) copy.kinds |= 1 << k;
    }
    out.push_back(std::move(copy));
  }
  return out;
}

StatusOr<int> StateKeeper::restore_from_disk_or_start() {
  return restore_recovery_state(" (no in-memory snapshot on any node), world size " +
                                std::to_string(run_.world != nullptr ? run_.world->size() : 1));
}

StatusOr<int> StateKeeper::restore_node_parts(const std::vector<NodeCopy>& copies, int gen) {
  comm::Group* world = run_.world;
  const int W = world != nullptr ? world->size() : 1;
  // This node's copies of generation `gen` that this rank answers for: the node's ranks share
  // its directory, so old rank r is looked at by the local rank r % (ranks per node).
  struct Part {
    int old_rank = 0;
    int64_t step = 0;
    std::string path;
    const std::vector<int64_t>* leaders = nullptr;
    int kinds = 0;
  };
  std::vector<Part> parts;
  int64_t old_world = 0;
  for (const NodeCopy& c : copies) {
    if (c.generation != gen || c.world <= 0 || c.rank < 0 || c.rank >= c.world ||
        c.rank % local_world_ != local_rank_)
      continue;
    parts.push_back({c.rank, c.step, c.path, &c.leaders, c.kinds});
    old_world = std::max<int64_t>(old_world, c.world);
  }
  CANN_RETURN_IF_ERROR(world_max(&old_world, 1, "parts_world"));
  // The old world's replica classes (plan_node_parts), as every part records them: per kind
  // (dense, experts) each old rank's class leader, -1: none of that kind. Agreed as leader + 2
  // (0: no part here says); a part that says otherwise than the others is not used.
  const size_t C = 2 * static_cast<size_t>(old_world);
  std::vector<int64_t> leader(C, 0);
  for (const Part& p : parts)
    if (p.leaders->size() == C)
      for (size_t i = 0; i < C; ++i) leader[i] = std::max(leader[i], (*p.leaders)[i] + 2);
  CANN_RETURN_IF_ERROR(world_max(leader.data(), leader.size(), "parts_classes"));
  for (int64_t& l : leader) l -= 2;
  std::erase_if(parts, [&](const Part& p) { return *p.leaders != leader; });
  // A class is known by its kind and leader, c = kind * old world + leader. Its step: the
  // newest any of its ranks' parts holds; the step restored: the oldest of those, which every
  // old rank finished and whose parts a node keeps beside a newer one.
  // The class of part p's kind `kind`, -1 where p carries none of it.
  auto class_of = [&](int kind, const Part& p) {
    const int64_t l = leader[static_cast<size_t>(kind) * old_world + p.old_rank];
    return l < 0 || (p.kinds >> kind & 1) == 0 ? int64_t{-1} : kind * old_world + l;
  };
  std::vector<int64_t> newest(C, -1);
  for (const Part& p : parts)
    for (int k = 0; k < 2; ++k)
      if (const int64_t c = class_of(k, p); c >= 0) newest[c] = std::max(newest[c], p.step);
  CANN_RETURN_IF_ERROR(world_max(newest.data(), newest.size(), "parts_steps"));
  int64_t step = std::numeric_limits<int64_t>::max();
  for (size_t c = 0; c < C; ++c) {
    if (leader[c] != static_cast<int64_t>(c % old_world)) continue;  // not a class
    if (newest[c] < 0) {
      log_warning("rank " + std::to_string(rank_) + ": no node left holds a snapshot of rank " +
                  std::to_string(c % old_world) + "'s part of generation " + std::to_string(gen) +
                  " or of any rank holding the same (their nodes were lost); restoring from disk");
      return -1;
    }
    step = std::min(step, newest[c]);
  }
  if (step == std::numeric_limits<int64_t>::max()) return -1;  // no class: nothing recorded
  // Which rank places each class: the first at or after its leader around the new world holding
  // a part of it at the step that verifies.
  std::map<int, ckpt::LoadedCheckpoint> held;  // by old rank
  std::vector<int> from(C, -1);                // the old rank whose part this rank would place
  std::vector<int64_t> score(C, 0);
  for (const Part& p : parts) {
    if (p.step != step || held.count(p.old_rank) != 0) continue;
    StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_checkpoint(p.path);
    if (!ck.ok()) {
      log_warning("rank " + std::to_string(rank_) + ": snapshot " + p.path +
                  " unusable: " + ck.status().message());
      continue;
    }
    held.emplace(p.old_rank, std::move(*ck));
    for (int k = 0; k < 2; ++k) {
      const int64_t c = class_of(k, p);
      if (c < 0 || from[c] >= 0) continue;
      from[c] = p.old_rank;
      score[c] = W - (rank_ - leader[c] % W + W) % W;
    }
  }
  std::vector<int64_t> best = score;
  CANN_RETURN_IF_ERROR(world_max(best.data(), best.size(), "parts_holders"));
  for (size_t c = 0; c < C; ++c) {
    if (leader[c] != static_cast<int64_t>(c % old_world) || best[c] > 0) continue;
    log_warning("rank " + std::to_string(rank_) + ": no snapshot of rank " +
                std::to_string(c % old_world) + "'s part of step " + std::to_string(step) +
                " verifies; restoring from disk");
    return -1;
  }
  // Each class's part into its place in the whole model; the sum over the world assembles it.
  ModelParts& model = *run_.model;
  // The new layout's whole model (a data-parallel one holds it as its own).
  const model::ParamTable& full =
      model.model_parallel() != nullptr ? model.full_table() : model.model().table();
  const size_t n = full.total_floats();
  full_state_.assign(3 * n, 0.0f);
  for (size_t c = 0; c < C; ++c) {
    if (from[c] < 0 || best[c] != score[c]) continue;
    const ckpt::LoadedCheckpoint& ck = held.at(from[c]);
    auto damaged = [&](const std::string& what) {
      return DataLoss(ck.path + ": " + what +
                      "; hint: the snapshot is damaged: resume from a disk checkpoint with "
                      "--resume");
    };
    std::vector<int64_t> runs;
    int64_t full_floats = 0;
    try {
      const nlohmann::json parts = nlohmann::json::parse(ck.meta_json).at("node_parts");
      runs = parts.at("runs").at(c / old_world).get<std::vector<int64_t>>();
      full_floats = parts.at("full_floats").get<int64_t>();
    } catch (const std::exception& e) {
      return damaged(std::string("no whole-model runs (") + e.what() + ")");
    }
    if (full_floats != static_cast<int64_t>(n))
      return DataLoss(ck.path + ": a part of a model of " + std::to_string(full_floats) +
                      " floats, this one has " + std::to_string(n) +
                      "; hint: resume with the model the job was started with");
    const char* names[3] = {"params", "adam_m", "adam_v"};
    for (int i = 0; i < 3; ++i) {
      const ckpt::Section* sec = ck.find(names[i]);
      if (sec == nullptr) return damaged(std::string("no section ") + names[i]);
      if (!model::place_run_groups(runs, reinterpret_cast<const float*>(sec->data.data()),
                                   sec->data.size() / sizeof(float), full_state_.data() + i * n, n))
        return damaged("its whole-model runs reach outside the model");
    }
  }
  if (world != nullptr) {
    comm::Options opts;
    opts.tag = "parts_assemble";
    Status s = world
                   ->allreduce(full_state_.data(), full_state_.size(), comm::DataType::kFloat32,
                               comm::ReduceOp::kSum, opts)
                   ->wait(kPartsWait);
    if (!s.ok()) return run_.on_comm_failure(s);
  }
  // The metadata and optional sections (sampler, RNG, step-log line, the optimizer's extra
  // state) of the part that placed old rank 0's dense class (rank 0 or a data-parallel
  // replica of it), from the rank that placed it.
  const int placer = static_cast<int>((W - best[0]) % W);
  std::string blob;
  if (rank_ == placer) {
    const ckpt::LoadedCheckpoint& ck = held.at(from[0]);
    nlohmann::json h;
    h["meta"] = ck.meta_json;
    h["path"] = ck.path;
    nlohmann::json extra = nlohmann::json::array();
    std::string payload;
    for (const ckpt::Section& sec : ck.sections) {
      if (sec.name == "params" || sec.name == "adam_m" || sec.name == "adam_v") continue;
      extra.push_back({sec.name, sec.data.size()});
      payload.append(sec.data.data(), sec.data.size());
    }
    h["sections"] = extra;
    blob = h.dump();
    blob.push_back('\0');
    blob += payload;
  }
  CANN_RETURN_IF_ERROR(broadcast_blob(blob, placer, "parts_meta"));
  ckpt::LoadedCheckpoint whole;
  whole.step = step;
  try {
    const size_t end = blob.find('\0');
    if (end == std::string::npos) throw std::runtime_error("no header end");
    const nlohmann::json h = nlohmann::json::parse(blob.substr(0, end));
    nlohmann::json meta =
        nlohmann::json::parse(ckpt::without_rank_snapshot_mark(h.at("meta").get<std::string>()));
    for (const char* key : {"expert_slots", "node_parts"}) meta.erase(key);
    meta.update(nlohmann::json::parse("{" + model_meta_members(*run_.spec, full) + "}"));
    whole.meta_json = meta.dump();
    whole.path = h.at("path").get<std::string>() + " and the other ranks' parts";
    const char* names[3] = {"params", "adam_m", "adam_v"};
    for (int i = 0; i < 3; ++i) {
      const char* at = reinterpret_cast<const char*>(full_state_.data() + i * n);
      whole.sections.push_back({names[i], std::vector<char>(at, at + n * sizeof(float))});
    }
    size_t pos = end + 1;
    for (const auto& e : h.at("sections")) {
      const size_t bytes = e.at(1).get<size_t>();
      if (pos + bytes > blob.size()) throw std::runtime_error("sections beyond the blob");
      whole.sections.push_back({e.at(0).get<std::string>(),
                                std::vector<char>(blob.data() + pos, blob.data() + pos + bytes)});
      pos += bytes;
    }
  } catch (const std::exception& e) {
    return DataLoss("rank " + std::to_string(rank_) +
                    ": old rank 0's snapshot metadata from rank " + std::to_string(placer) +
                    " is malformed (" + e.what() +
                    "); hint: resume from a disk checkpoint with --resume");
  }
  std::vector<float>().swap(full_state_);
  CANN_ASSIGN_OR_RETURN(const int restored, restore(whole));
  event("state_restored", "step " + std::to_string(restored) + " assembled from the snapshots of " +
                              std::to_string(old_world) + " ranks of generation " +
                              std::to_string(gen) + ", world size " + std::to_string(W));
  return restored;
}

}  // namespace cann::train
