#include "model/expert_placement.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace cann::model {

int slots_per_rank(int E, int ep) {
  CANN_CHECK(E > 0 && ep > 0) << E << " experts over " << ep << " ranks";
  return (E + ep - 1) / ep;
}

int identity_expert(int E, int ep, int rank, int j) {
  const int q = E / ep, extra = E % ep;
  const int held = q + (rank < extra ? 1 : 0), first = rank * q + std::min(rank, extra);
  return j < held ? first + j : kNoExpert;
}

std::string experts_per_rank(int E, int ep) {
  const int q = E / ep, extra = E % ep;
  if (extra == 0) return std::to_string(q);
  if (ep > 8)  // the counts rank by rank would be a long line
    return std::to_string(q + 1) + " on the first " + std::to_string(extra) + ", " +
           std::to_string(q) + " on the other " + std::to_string(ep - extra);
  std::string out;
  for (int r = 0; r < ep; ++r) out += (r ? ", " : "") + std::to_string(q + (r < extra ? 1 : 0));
  return out;
}

ExpertSlots identity_slots(int E, int ep) {
  const int El = slots_per_rank(E, ep);
  ExpertSlots at(static_cast<size_t>(ep) * El, kNoExpert);
  for (int r = 0; r < ep; ++r)
    for (int j = 0; j < El; ++j) at[static_cast<size_t>(r) * El + j] = identity_expert(E, ep, r, j);
  return at;
}

int experts_in(const ExpertSlots& expert_at) {
  return static_cast<int>(
      std::count_if(expert_at.begin(), expert_at.end(), [](int e) { return e != kNoExpert; }));
}

bool is_placement(const ExpertSlots& at, int E, int ep) {
  if (E <= 0 || ep <= 0 || at.size() != static_cast<size_t>(ep) * slots_per_rank(E, ep))
    return false;
  // Each expert once; every other slot empty.
  std::vector<int> seen(static_cast<size_t>(E), 0);
  for (const int e : at) {
    if (e == kNoExpert) continue;
    if (e < 0 || e >= E || seen[static_cast<size_t>(e)]++ > 0) return false;
  }
  return experts_in(at) == E;
}

std::vector<int> slot_of(const ExpertSlots& expert_at) {
  std::vector<int> inv(static_cast<size_t>(experts_in(expert_at)), -1);
  for (size_t s = 0; s < expert_at.size(); ++s)
    if (expert_at[s] != kNoExpert) inv[static_cast<size_t>(expert_at[s])] = static_cast<int>(s);
  return inv;
}

namespace {

// The load of the expert in slot s (an empty slot has none).
double load_at(const std::vector<double>& expert_load, const ExpertSlots& at, size_t s) {
  return at[s] == kNoExpert ? 0.0 : expert_load[static_cast<size_t>(at[s])];
}

}  // namespace

std::vector<double> rank_loads(const std::vector<double>& expert_load, const ExpertSlots& at,
                               int ep) {
  const size_t El = at.size() / static_cast<size_t>(ep);
  std::vector<double> load(static_cast<size_t>(ep), 0.0);
  for (size_t s = 0; s < at.size(); ++s) load[s / El] += load_at(expert_load, at, s);
  return load;
}

namespace {

// Longest processing time first with equal slot counts: experts in order of falling load, each
// onto the least loaded rank with a free slot (ties to the rank that holds it now); experts
// that stay keep their slot, the others fill the free ones in expert order.
ExpertSlots longest_first(const std::vector<double>& expert_load, const ExpertSlots& now, int ep) {
  const int E = experts_in(now), El = static_cast<int>(now.size()) / ep;
  const std::vector<int> was = slot_of(now);
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return expert_load[a] > expert_load[b]; });
  std::vector<double> load(static_cast<size_t>(ep), 0.0);
  std::vector<int> free(static_cast<size_t>(ep), El);
  std::vector<int> rank_of(static_cast<size_t>(E), -1);
  for (int e : order) {
    const int home = was[static_cast<size_t>(e)] / El;
    int best = -1;
    for (int r = 0; r < ep; ++r) {
      if (free[r] == 0) continue;
      if (best < 0 || load[r] < load[best] || (load[r] == load[best] && r == home)) best = r;
    }
    rank_of[static_cast<size_t>(e)] = best;
    load[best] += expert_load[static_cast<size_t>(e)];
    --free[best];
  }
  ExpertSlots out(now.size(), kNoExpert);
  for (int e = 0; e < E; ++e) {
    const int s = was[static_cast<size_t>(e)];
    if (s / El == rank_of[static_cast<size_t>(e)]) out[static_cast<size_t>(s)] = e;
  }
  for (int e = 0; e < E; ++e) {
    const int r = rank_of[static_cast<size_t>(e)];
    if (was[static_cast<size_t>(e)] / El == r) continue;
    for (int j = 0; j < El; ++j) {
      const size_t s = static_cast<size_t>(r * El + j);
      if (out[s] < 0) {
        out[s] = e;
        break;
      }
    }
  }
  return out;
}

// From the current placement, swaps between the most and the least loaded rank while one
// lowers the larger of the two: each swap moves two experts (or one into an empty slot), and
// only as many happen as help.
ExpertSlots swapped(const std::vector<double>& expert_load, ExpertSlots at, int ep) {
  const int S = static_cast<int>(at.size()), El = S / ep;
  for (int round = 0; round < S * ep; ++round) {
    const std::vector<double> load = rank_loads(expert_load, at, ep);
    const int hi = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    const int lo = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    double best = load[hi];
    int best_a = -1, best_b = -1;
    for (int a = hi * El; a < (hi + 1) * El; ++a)
      for (int b = lo * El; b < (lo + 1) * El; ++b) {
        const double d = load_at(expert_load, at, a) - load_at(expert_load, at, b);
        if (d <= 0) continue;
        const double larger = std::max(load[hi] - d, load[lo] + d);
        if (larger < best) {
          best = larger;
          best_a = a;
          best_b = b;
        }
      }
    if (best_a < 0) break;
    std::swap(at[best_a], at[best_b]);
  }
  return at;
}

double largest(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

}  // namespace

ExpertSlots balanced_slots(const std::vector<double>& expert_load, const ExpertSlots& now, int ep) {
  const int E = experts_in(now);
  CANN_CHECK(is_placement(now, E, ep) && expert_load.size() == static_cast<size_t>(E))
      << "expert placement: " << E << " experts over " << ep << " ranks";
  ExpertSlots few = swapped(expert_load, now, ep);
  ExpertSlots lpt = longest_first(expert_load, now, ep);
  // The swaps move fewer experts; longest-first wins when its largest rank load is clearly
  // (1%) smaller.
  const double a = largest(rank_loads(expert_load, few, ep));
  const double b = largest(rank_loads(expert_load, lpt, ep));
  return b < 0.99 * a ? lpt : few;
}

int experts_moved(const ExpertSlots& from, const ExpertSlots& to, int ep) {
  const size_t El = from.size() / static_cast<size_t>(ep);
  const std::vector<int> a = slot_of(from), b = slot_of(to);
  int moved = 0;
  for (size_t e = 0; e < a.size(); ++e)
    moved += static_cast<size_t>(a[e]) / El != static_cast<size_t>(b[e]) / El;
  return moved;
}

int busiest_rank_moves(const ExpertSlots& from, const ExpertSlots& to, int ep) {
  const size_t El = from.size() / static_cast<size_t>(ep);
  const std::vector<int> a = slot_of(from), b = slot_of(to);
  std::vector<int> sent(static_cast<size_t>(ep), 0), received(static_cast<size_t>(ep), 0);
  for (size_t e = 0; e < a.size(); ++e) {
    const size_t src = static_cast<size_t>(a[e]) / El, dst = static_cast<size_t>(b[e]) / El;
    if (src == dst) continue;
    ++sent[src];
    ++received[dst];
  }
  return std::max(*std::max_element(sent.begin(), sent.end()),
                  *std::max_element(received.begin(), received.end()));
}

}  // namespace cann::model
