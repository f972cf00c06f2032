// Culprit finding and failure markers of the gloo backend (the scheme is in the header).
#include "comm/gloo_failure.h"

#include <map>
#include <set>
#include <sstream>

namespace cann::comm {
namespace {

constexpr std::chrono::milliseconds kMarkerGrace{200};

std::string marker_key(int rank) {
  return "failed/" + std::to_string(rank);
}

// Marker value: "dead=3,5\n<message>".
struct Marker {
  std::set<int> dead;
  std::string message;
};

Marker parse_marker(const std::string& v) {
  Marker m;
  const size_t nl = v.find('\n');
  std::string head = v.substr(0, nl);
  m.message = nl == std::string::npos ? "" : v.substr(nl + 1);
  if (head.rfind("dead=", 0) == 0) {
    std::stringstream ss(head.substr(5));
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) m.dead.insert(std::atoi(item.c_str()));
  }
  return m;
}

std::map<int, Marker> read_markers(Store& store, const std::map<int, std::string>& ranks) {
  std::map<int, Marker> markers;
  for (const auto& [r, unused] : ranks) {
    auto v = store.try_get(marker_key(r));
    if (v.ok() && v->has_value()) markers[r] = parse_marker(**v);
  }
  return markers;
}

}  // namespace

Status GlooFailureReport::report(const std::string& what, const Status& cause,
                                 std::span<GlooChannel* const> channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Connections holding errors of their own, over all channels (first message per rank).
  std::map<int, std::string> broken;
  for (GlooChannel* ch : channels)
    if (ch)
      for (auto& [r, m] : ch->broken_peers()) broken.emplace(r, m);

  std::map<int, Marker> markers = read_markers(*store_, broken);
  std::set<int> named_dead;
  for (const auto& [r, m] : markers) named_dead.insert(m.dead.begin(), m.dead.end());
  std::vector<std::string> grace_keys;
  for (const auto& [r, m] : broken)
    if (!markers.count(r) && !named_dead.count(r)) grace_keys.push_back(marker_key(r));
  if (!grace_keys.empty()) {
    (void)store_->wait(grace_keys, kMarkerGrace);  // a timeout here is an answer, not an error
    markers = read_markers(*store_, broken);
    for (const auto& [r, m] : markers) named_dead.insert(m.dead.begin(), m.dead.end());
  }

  // Dead: broken connections with no marker, and whatever the markers of others name.
  std::map<int, std::string> dead;
  for (const auto& [r, m] : broken)
    if (!markers.count(r)) dead[r] = m;
  for (int r : named_dead)
    if (r != rank_ && !dead.count(r)) {
      int reporter = -1;
      for (const auto& [who, m] : markers)
        if (m.dead.count(r)) reporter = who;
      dead[r] = "reported by rank " + std::to_string(reporter);
    }

  std::string summary;
  if (!dead.empty()) {
    summary = dead.size() == 1 ? "dead or unreachable peer: " : "dead or unreachable peers: ";
    bool first = true;
    for (const auto& [r, m] : dead) {
      summary += (first ? "rank " : ", rank ") + std::to_string(r) + " (" + m + ")";
      first = false;
    }
  } else if (!markers.empty()) {
    const auto& [r, m] = *markers.begin();
    summary = "rank " + std::to_string(r) + " failed first: " + m.message;
  }
  // The marker carries the message without the hint: other ranks quote it inside their own.
  std::string message = what + " failed: ";
  message += summary.empty() ? cause.message() : summary + " [here: " + cause.message() + "]";
  if (!published_) {
    published_ = true;
    std::string dead_list;
    for (const auto& [r, m] : dead) dead_list += (dead_list.empty() ? "" : ",") + std::to_string(r);
    (void)store_->set(marker_key(rank_), "dead=" + dead_list + "\n" + message);
  }
  if (cause.code() == StatusCode::kIoError)
    message += "; hint: the group is broken; rebuild it under a fresh store prefix";
  for (GlooChannel* ch : channels)
    if (ch) ch->abort();
  return Status(cause.code() == StatusCode::kOk ? StatusCode::kIoError : cause.code(), message);
}

}  // namespace cann::comm
