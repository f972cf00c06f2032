// Job registry files.
#include "debug/job_registry.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "core/paths.h"

namespace cann::debug {
namespace {

std::string jobs_dir() {
  return cann_home() + "/jobs";
}

// The job id is the first component of the key prefix; ids cannot contain '/'.
std::string file_for(const std::string& id) {
  return jobs_dir() + "/" + id + ".json";
}

bool alive(int pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

}  // namespace

Status register_job(const JobRecord& job) {
  CANN_RETURN_IF_ERROR(make_dirs(jobs_dir()));
  nlohmann::json j = {{"id", job.id},
                      {"store", job.store_url},
                      {"key_prefix", job.key_prefix},
                      {"world_size", job.world_size},
                      {"agent_pid", job.agent_pid}};
  return write_file_atomic(file_for(job.id), j.dump());
}

void unregister_job(const std::string& id) {
  // Several agents of one job on one machine share the record: only its writer removes it.
  auto text = read_file(file_for(id));
  if (text.ok()) {
    try {
      if (nlohmann::json::parse(*text).value("agent_pid", 0) != static_cast<int>(getpid())) return;
    } catch (const std::exception&) {
    }
  }
  (void)remove_all(file_for(id));
}

StatusOr<JobRecord> find_job(const std::string& id) {
  std::vector<JobRecord> running;
  auto names = list_dir(jobs_dir());
  if (names.ok()) {
    for (const std::string& name : *names) {
      if (!name.ends_with(".json")) continue;
      auto text = read_file(jobs_dir() + "/" + name);
      if (!text.ok()) continue;
      try {
        const nlohmann::json j = nlohmann::json::parse(*text);
        JobRecord r{j.at("id"), j.at("store"), j.at("key_prefix"), j.value("world_size", 0),
                    j.value("agent_pid", 0)};
        if (alive(r.agent_pid)) running.push_back(r);
      } catch (const std::exception&) {
      }
    }
  }
  std::string ids;
  for (const auto& r : running) {
    if (r.id == id) return r;
    if (!ids.empty()) ids += ", ";
    ids += r.id;
  }
  if (id.empty() && running.size() == 1) return running[0];
  if (running.empty())
    return NotFound("no running cann-train job on this machine (" + jobs_dir() +
                    " lists none); hint: pass --store URL --prefix PREFIX for a job elsewhere");
  if (id.empty())
    return InvalidArgument("several jobs are running (" + ids + "); hint: pass --job ID");
  return NotFound("no running job '" + id + "'; running: " + ids);
}

}  // namespace cann::debug
