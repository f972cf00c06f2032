// The registry of running jobs on this machine: the agent writes
// $CANN_TRAIN_HOME/jobs/<id>.json when a job starts (store URL, key prefix, world size, its pid)
// and removes it at the end, so `cann-train debug hang --job ID` can find the job's store.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::debug {

struct JobRecord {
  std::string id;          // the job id (--rdzv-id or a random one)
  std::string store_url;   // where the job's keys live
  std::string key_prefix;  // "<id>/round<r>"
  int world_size = 0;
  int agent_pid = 0;
};

Status register_job(const JobRecord& job);
void unregister_job(const std::string& id);
// The job with this id; with an empty id, the only running job (an error lists them when there
// are several). Records of agents that are gone are skipped.
StatusOr<JobRecord> find_job(const std::string& id);

}  // namespace cann::debug
