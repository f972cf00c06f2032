// A process's heartbeat for the elastic agent; see heartbeat.h.
#include "train/heartbeat.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "comm/job_keys.h"
#include "comm/store.h"
#include "train/dist_env.h"

namespace cann::train {

StatusOr<std::unique_ptr<Heartbeat>> Heartbeat::start(const DistEnv& env, int total_steps,
                                                      bool follow_membership,
                                                      std::function<int()> progress) {
  std::unique_ptr<Heartbeat> h(new Heartbeat());
  CANN_ASSIGN_OR_RETURN(h->store_, comm::open_store(env.store_url));
  h->key_ = "cann/" + env.job_id + "/heartbeat/rank" + std::to_string(env.rank);
  h->membership_key_ = comm::membership_key("cann/" + env.job_id, env.node_rank,
                                            env.world_size / std::max(env.local_world_size, 1));
  h->follow_ = follow_membership;
  h->progress_ = std::move(progress);
  h->interval_s_ = env.heartbeat_interval_s;
  h->total_steps_ = total_steps;
  h->generation_ = env.generation < 0 ? 0 : env.generation;
  h->beat();  // the first beat says this process is up, before its first step
  Heartbeat* self = h.get();
  h->thread_ = std::thread([self] {
    while (!self->stop_) {
      const auto next = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(self->interval_s_));
      // Slices, so the destructor does not wait a whole interval; not shorter, so the beating
      // thread does not take the cores from the training threads.
      while (!self->stop_ && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(
            std::min(std::chrono::steady_clock::duration(next - std::chrono::steady_clock::now()),
                     std::chrono::steady_clock::duration(std::chrono::milliseconds(50))));
      if (!self->stop_) self->beat();
    }
  });
  return h;
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::beat() {
  if (follow_) {
    // The record is the agent's JSON object; only its generation is read here.
    auto text = store_->try_get(membership_key_);
    if (text.ok() && text->has_value()) {
      const std::string& m = **text;
      const size_t at = m.find("\"generation\":");
      if (at != std::string::npos) generation_ = std::atoi(m.c_str() + at + 13);
    }
  }
  if (progress_) step_ = progress_();
  const std::string value = std::to_string(generation_.load()) + " " +
                            std::to_string(step_.load()) + " " + std::to_string(total_steps_) +
                            " " + std::to_string(++beats_);
  (void)store_->set(key_, value);  // a missed beat is the agent's to judge
}

}  // namespace cann::train
