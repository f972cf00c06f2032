// Flight recorder ring buffer.
#include "comm/flight_recorder.h"

#include "core/json_line.h"
#include "core/timer.h"

namespace cann::comm {

void FlightRecorder::set_group(std::string name, int rank, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  group_ = std::move(name);
  rank_ = rank;
  size_ = size;
}

// Sequence numbers start at 1; seq % capacity picks the slot, and a slot is valid for `seq`
// only while it still holds that sequence number (the ring overwrites the oldest).
FlightEntry* FlightRecorder::find(uint64_t seq) {
  FlightEntry& e = ring_[seq % ring_.size()];
  return e.seq == seq ? &e : nullptr;
}

void FlightRecorder::enqueued(uint64_t seq, const std::string& op, const std::string& tag,
                              uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  FlightEntry& e = ring_[seq % ring_.size()];
  e = FlightEntry{seq, op, tag, bytes, unix_seconds(), 0.0, 0.0, true};
  if (seq > last_enqueued_) last_enqueued_ = seq;
}

void FlightRecorder::started(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = find(seq)) e->started = unix_seconds();
  if (seq > last_started_) last_started_ = seq;
}

void FlightRecorder::completed(uint64_t seq, bool ok) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = find(seq)) {
    e->completed = unix_seconds();
    e->ok = ok;
  }
  if (seq > last_completed_) last_completed_ = seq;
}

std::string FlightRecorder::summary_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string in_flight = "[";
  const uint64_t first = last_completed_ + 1;
  for (uint64_t s = first; s <= last_enqueued_; ++s) {
    const FlightEntry& e = ring_[s % ring_.size()];
    if (e.seq != s || e.completed != 0.0) continue;
    JsonLine j;
    j.add("seq", static_cast<int64_t>(e.seq))
        .add("op", e.op)
        .add("tag", e.tag)
        .add("bytes", static_cast<int64_t>(e.bytes))
        .add("enqueued", e.enqueued)
        .add("started", e.started);
    if (in_flight.size() > 1) in_flight += ",";
    in_flight += j.str();
  }
  in_flight += "]";
  JsonLine j;
  j.add("group", group_)
      .add("rank", rank_)
      .add("size", size_)
      .add("last_enqueued", static_cast<int64_t>(last_enqueued_))
      .add("last_started", static_cast<int64_t>(last_started_))
      .add("last_completed", static_cast<int64_t>(last_completed_))
      .add_raw("in_flight", in_flight);
  return j.str();
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FlightEntry> out;
  const uint64_t n = ring_.size();
  const uint64_t first = last_enqueued_ >= n ? last_enqueued_ - n + 1 : 1;
  for (uint64_t s = first; s <= last_enqueued_; ++s)
    if (ring_[s % n].seq == s) out.push_back(ring_[s % n]);
  return out;
}

}  // namespace cann::comm
