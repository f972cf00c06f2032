// Multi-node elastic under model parallelism: snapshots of each rank's part, with a copy on the
// next node, assembled into the whole state when the world changes (RunState::node_parts).
//
// Every rank's snapshot holds its own buffers in its own layout (parameters and both moments,
// ZeRO's gathered over its data-parallel group) and, in its metadata ("node_parts"), where each
// element it owns lands in the whole model (ModelParts::full_runs, a few strided groups a
// tensor; every element of the whole model is owned by exactly one rank). The rank then sends
// the same bytes to the rank of the same place on the next node (rank + ranks per node, around
// the ring), which keeps them in its node's directory of the generation as that rank's copy.
// So each rank's part lives on two nodes: any one node lost leaves every part somewhere. Per
// rank and snapshot this moves its own part once over the network, where a whole-model
// snapshot all-reduces the whole state (3 full models) on every rank.
//
// A new generation (a node lost, joined, or scaled) restores from them: the ranks agree on the
// generation, on its step (the oldest of the old ranks' newest), and on which rank places each
// old rank's part (the first at or after it, around the new world, that holds a copy which
// verifies); every rank places the parts it was given into a zeroed whole model and one
// all-reduce sums them, after which each holds the whole state and loads its own part of the
// new layout from it, as from a disk checkpoint. The step's sampler position, RNG and step-log
// line come from old rank 0's copy, broadcast by whoever placed it.
//
// Not survivable from memory: losing two neighbouring nodes together (node i and i + 1 hold the
// only copies of node i's parts; with two nodes, both), or a part whose copies all fail to
// verify. Every rank then loads the newest disk checkpoint (else starts over), alike, and says
// which rank's part was lost.
#include <algorithm>
#include <cstring>
#include <limits>

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

// 4-byte words: what the transport moves.
std::vector<int32_t> as_words(const std::string& text) {
  std::vector<int32_t> words((text.size() + 3) / 4, 0);
  if (!text.empty()) std::memcpy(words.data(), text.data(), text.size());
  return words;
}

}  // namespace

Status StateKeeper::copy_to_next_node(const ckpt::CheckpointWrite& w) {
  comm::Group* world = run_.world;
  const int W = world != nullptr ? world->size() : 1, L = local_world_;
  if (W <= L || W % L != 0) return OkStatus();  // one node: its own copies are all there is
  const int to = (rank_ + L) % W, from = (rank_ - L + W) % W;
  comm::Options opts;
  opts.tag = "snapshot_copy";
  auto failed = [this](const Status& s) { return run_.on_comm_failure(s); };
  // One exchange over the world, each rank's words to one rank: a collective, so that a peer
  // lost meanwhile fails it on every rank as promptly as the step's own collectives.
  std::vector<int32_t>& out = copy_.out;
  out = as_words(header_of(w));
  const size_t header_words = out.size();
  for (const ckpt::SectionView& s : w.sections) {
    if (s.bytes % 4 != 0)
      return Internal("snapshot section " + s.name + " is not a whole number of words");
    const size_t at = out.size();
    out.resize(at + s.bytes / 4);
    if (s.bytes > 0) std::memcpy(out.data() + at, s.data, s.bytes);
  }
  std::vector<int64_t> sizes_out(2 * static_cast<size_t>(W), 0), sizes_in(sizes_out.size(), 0);
  sizes_out[2 * to] = static_cast<int64_t>(header_words);
  sizes_out[2 * to + 1] = static_cast<int64_t>(out.size());
  if (Status s = world->alltoall(sizes_in.data(), sizes_out.data(), 2, comm::DataType::kInt64, opts)
                     ->wait(kPartsWait);
      !s.ok())
    return failed(s);
  const int64_t header_in = sizes_in[2 * from], words_in = sizes_in[2 * from + 1];
  if (header_in <= 0 || words_in < header_in || words_in > (int64_t{1} << 38))
    return failed(DataLoss("rank " + std::to_string(from) + " announced a snapshot copy of " +
                           std::to_string(words_in) + " words, " + std::to_string(header_in) +
                           " of them its header"));
  std::vector<size_t> in_counts(static_cast<size_t>(W), 0), out_counts(in_counts);
  in_counts[to] = out.size();
  out_counts[from] = static_cast<size_t>(words_in);
  std::vector<int32_t>& in = copy_.in;
  in.assign(static_cast<size_t>(words_in), 0);
  if (Status s = world
                     ->alltoallv(in.data(), out_counts, out.data(), in_counts,
                                 comm::DataType::kInt32, opts)
                     ->wait(kPartsWait);
      !s.ok())
    return failed(s);
  ckpt::CheckpointWrite copy;
  try {
    std::string text(reinterpret_cast<const char*>(in.data()), static_cast<size_t>(header_in) * 4);
    text.resize(std::strlen(text.c_str()));  // the words' padding
    const nlohmann::json h = nlohmann::json::parse(text);
    copy.step = h.at("step").get<int64_t>();
    copy.meta_json = h.at("meta").get<std::string>();
    size_t at = static_cast<size_t>(header_in);
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
      copy.world = m["node_parts"].value("world", int64_t{0});
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
  };
  std::vector<Part> parts;
  int64_t old_world = 0;
  for (const NodeCopy& c : copies) {
    if (c.generation != gen || c.world <= 0 || c.rank < 0 || c.rank >= c.world ||
        c.rank % local_world_ != local_rank_)
      continue;
    parts.push_back({c.rank, c.step, c.path});
    old_world = std::max<int64_t>(old_world, c.world);
  }
  CANN_RETURN_IF_ERROR(world_max(&old_world, 1, "parts_world"));
  // The step: the oldest of the old ranks' newest, which every old rank finished and whose
  // copies a node keeps beside a newer one.
  std::vector<int64_t> newest(static_cast<size_t>(old_world), -1);
  for (const Part& p : parts)
    if (p.old_rank < old_world) newest[p.old_rank] = std::max(newest[p.old_rank], p.step);
  CANN_RETURN_IF_ERROR(world_max(newest.data(), newest.size(), "parts_steps"));
  const auto lost = std::find(newest.begin(), newest.end(), -1);
  if (lost != newest.end()) {
    log_warning("rank " + std::to_string(rank_) + ": no node left holds a snapshot of rank " +
                std::to_string(lost - newest.begin()) + " of generation " + std::to_string(gen) +
                " (its node and the next were lost); restoring from disk");
    return -1;
  }
  const int64_t step = *std::min_element(newest.begin(), newest.end());
  // Which rank places each old rank's part: the first at or after it around the new world
  // holding a copy that verifies.
  std::vector<std::optional<ckpt::LoadedCheckpoint>> held(static_cast<size_t>(old_world));
  std::vector<int64_t> score(static_cast<size_t>(old_world), 0);
  for (const Part& p : parts) {
    if (p.step != step || held[p.old_rank]) continue;
    StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_checkpoint(p.path);
    if (!ck.ok()) {
      log_warning("rank " + std::to_string(rank_) + ": snapshot " + p.path +
                  " unusable: " + ck.status().message());
      continue;
    }
    held[p.old_rank] = std::move(*ck);
    score[p.old_rank] = W - (rank_ - p.old_rank % W + W) % W;
  }
  std::vector<int64_t> best = score;
  CANN_RETURN_IF_ERROR(world_max(best.data(), best.size(), "parts_holders"));
  for (int64_t r = 0; r < old_world; ++r) {
    if (best[r] > 0) continue;
    log_warning("rank " + std::to_string(rank_) + ": no copy of rank " + std::to_string(r) +
                "'s snapshot of step " + std::to_string(step) + " verifies; restoring from disk");
    return -1;
  }
  // Each part into its place in the whole model; the sum over the world assembles it.
  ModelParts& model = *run_.model;
  // The new layout's whole model (a data-parallel one holds it as its own).
  const model::ParamTable& full =
      model.model_parallel() != nullptr ? model.full_table() : model.model().table();
  const size_t n = full.total_floats();
  full_state_.assign(3 * n, 0.0f);
  for (int64_t r = 0; r < old_world; ++r) {
    if (best[r] != score[r] || !held[r]) continue;
    const ckpt::LoadedCheckpoint& ck = *held[r];
    auto damaged = [&](const std::string& what) {
      return DataLoss(ck.path + ": " + what +
                      "; hint: the snapshot is damaged: resume from a disk checkpoint with "
                      "--resume");
    };
    std::vector<int64_t> runs;
    int64_t full_floats = 0;
    try {
      const nlohmann::json parts = nlohmann::json::parse(ck.meta_json).at("node_parts");
      runs = parts.at("runs").get<std::vector<int64_t>>();
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
  // Old rank 0's metadata and optional sections (its sampler, RNG, step-log line, the
  // optimizer's extra state) from the rank that placed it.
  const int placer = static_cast<int>((W - best[0]) % W);
  std::string blob;
  if (rank_ == placer) {
    const ckpt::LoadedCheckpoint& ck = *held[0];
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
