// Model::move_experts: experts change ranks under expert parallelism (model/expert_placement.h).
//
// Every rank knows the old and the new placement, so no counts are exchanged: what rank r sends
// to rank q is, for each moved layer (ascending) and each of q's new local slots j (ascending)
// whose expert lived on r, that expert's floats of every array (parameters first, then each
// state array), tensor by tensor in table order. The receiver reads each source's stream in the
// same order. One all-to-allv carries every layer.
#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "model/model.h"

namespace cann::model {

namespace {

// One expert tensor of a layer: local expert j's floats are [offset + j*per, offset + (j+1)*per).
struct ExpertPiece {
  size_t offset = 0, per = 0;
};

// One moved layer: its expert tensors, the floats one expert carries over every array, and the
// old slot of each expert.
struct MovingLayer {
  std::vector<ExpertPiece> pieces;
  size_t floats = 0;
  std::vector<int> was;
};

}  // namespace

Status Model::move_experts(const std::map<int, ExpertSlots>& to, const std::vector<float*>& state) {
  if (ep_.size <= 1 || to.empty()) return OkStatus();
  const int P = ep_.size, r = ep_.rank, E = spec_.num_local_experts;
  const int El = slots_per_rank(E, P), S = P * El;
  std::vector<float*> arrays = {params_at_};
  arrays.insert(arrays.end(), state.begin(), state.end());
  std::map<int, MovingLayer> layers;
  for (const TensorInfo& t : table_.tensors())
    if (t.expert && to.count(t.layer))
      layers[t.layer].pieces.push_back({t.offset, t.numel / static_cast<size_t>(t.shape[0])});
  for (const auto& [layer, slots] : to) {
    CANN_CHECK(is_placement(slots, E, P) && layers.count(layer) && !expert_slots_[layer].empty())
        << "move_experts: layer " << layer << " is not a MoE layer of this stage";
    MovingLayer& m = layers[layer];
    for (const ExpertPiece& p : m.pieces) m.floats += p.per * arrays.size();
    m.was = slot_of(expert_slots_[layer]);
  }
  // Copies local expert j of a layer, every array and tensor, to out.
  auto pack = [&](const MovingLayer& m, int j, float* out) {
    for (float* a : arrays)
      for (const ExpertPiece& p : m.pieces) {
        std::memcpy(out, a + p.offset + static_cast<size_t>(j) * p.per, p.per * sizeof(float));
        out += p.per;
      }
  };

  // Counts first, then each destination's stream at its offset, in rank order.
  std::vector<size_t> send_counts(static_cast<size_t>(P), 0), recv_counts(P, 0);
  for (const auto& [layer, slots] : to) {
    const MovingLayer& m = layers[layer];
    for (int s = 0; s < S; ++s) {
      if (slots[s] == kNoExpert) continue;
      const int from = m.was[static_cast<size_t>(slots[s])] / El, dest = s / El;
      if (from == dest) continue;
      if (from == r) send_counts[dest] += m.floats;
      if (dest == r) recv_counts[from] += m.floats;
    }
  }
  std::vector<size_t> send_at(static_cast<size_t>(P), 0), recv_at(static_cast<size_t>(P), 0);
  for (int q = 1; q < P; ++q) {
    send_at[q] = send_at[q - 1] + send_counts[q - 1];
    recv_at[q] = recv_at[q - 1] + recv_counts[q - 1];
  }
  // Kept between moves: fresh pages for every move would cost more than the copies.
  move_send_.resize(send_at[P - 1] + send_counts[P - 1]);
  move_recv_.resize(recv_at[P - 1] + recv_counts[P - 1]);
  for (const auto& [layer, slots] : to) {
    const MovingLayer& m = layers[layer];
    for (int s = 0; s < S; ++s) {
      if (slots[s] == kNoExpert) continue;
      const int old_slot = m.was[static_cast<size_t>(slots[s])];
      if (old_slot / El != r || s / El == r) continue;
      pack(m, old_slot % El, move_send_.data() + send_at[s / El]);
      send_at[s / El] += m.floats;
    }
  }
  CANN_RETURN_IF_ERROR(ep_.comm->alltoallv(move_recv_.data(), recv_counts.data(), move_send_.data(),
                                           send_counts.data()));

  // Each layer's new local experts, assembled apart (an expert staying on this rank may change
  // slot) and then written in place.
  for (const auto& [layer, slots] : to) {
    const MovingLayer& m = layers[layer];
    move_block_.resize(static_cast<size_t>(El) * m.floats);
    for (int j = 0; j < El; ++j) {
      float* dst = move_block_.data() + static_cast<size_t>(j) * m.floats;
      const int e = slots[r * El + j];
      if (e == kNoExpert) {  // an empty slot holds zeros
        std::fill(dst, dst + m.floats, 0.0f);
        continue;
      }
      const int old_slot = m.was[static_cast<size_t>(e)];
      const int from = old_slot / El;
      if (from == r) {
        pack(m, old_slot % El, dst);
      } else {
        std::memcpy(dst, move_recv_.data() + recv_at[from], m.floats * sizeof(float));
        recv_at[from] += m.floats;
      }
    }
    const float* src = move_block_.data();
    for (int j = 0; j < El; ++j)
      for (float* a : arrays)
        for (const ExpertPiece& p : m.pieces) {
          std::memcpy(a + p.offset + static_cast<size_t>(j) * p.per, src, p.per * sizeof(float));
          src += p.per;
        }
    expert_slots_[layer] = slots;
  }
  expert_weights_changed();  // a copy's owner may have changed
  return OkStatus();
}

}  // namespace cann::model
