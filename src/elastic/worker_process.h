// The process side of an agent, shared by the one-node agent (agent.cc) and the multi-node
// elastic agent (node_agent.cc): a worker process with its output pipes, fork/exec with the
// worker's environment, draining output, and how a process ended.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "elastic/output_forwarder.h"

namespace cann::elastic {

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  bool running = false;
  bool stopped_by_agent = false;  // the agent signalled it before it exited
  int status = 0;                 // waitpid status once exited
  int exit_order = -1;            // order in which the agent saw it exit
  std::unique_ptr<OutputForwarder> out, err;
};

std::string random_id();
// "exited with status 1", "was killed by signal 9 (KILL)".
std::string describe_exit(int status);
// Exited with a non-zero status or by a signal.
bool failed(int status);
std::string seconds_text(double s);  // "0.123 s"

// Forks and execs this binary (/proc/self/exe) with `args`, `env` added to the environment and
// stdout/stderr on the given descriptors. The child dies with the agent (PR_SET_PDEATHSIG) and
// ignores SIGINT (the agent forwards a Ctrl-C as SIGTERM).
StatusOr<pid_t> spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                      int out_fd, int err_fd);

// Starts worker `w` (rank and local_rank set by the caller): pipes, spawn, forwarders that
// prefix its lines with "[rank N] " (rank 0's stdout unprefixed with plain_rank0_stdout).
Status start_worker(Worker& w, const std::vector<std::string>& args,
                    const std::vector<std::string>& env, bool plain_rank0_stdout);

// Prefixes the running worker's output lines with its rank, w.rank (none on rank 0's stdout
// with plain_rank0_stdout); again when a kept worker takes another rank.
void label_output(Worker& w, bool plain_rank0_stdout);

// Reads what is available on fd into the forwarder; returns false at end of file.
bool pump(int fd, OutputForwarder& fwd);
// Reads both pipes of an exited worker to their end, closes them and flushes the forwarders.
void drain(Worker& w);
// One poll() round over every open pipe of `workers` (up to timeout_ms), forwarding output.
void pump_all(std::vector<Worker>& workers, int timeout_ms);
// Sends `sig` to every running worker and marks it stopped by the agent.
void signal_workers(std::vector<Worker>& workers, int sig);

// A directory for the workers' in-memory snapshots: in /dev/shm (memory) when it exists. Its
// name carries the creating process's pid and start time, and creating one first removes the
// roots under the same base whose creator is gone (sweep_stale_snapshot_roots).
StatusOr<std::string> make_snapshot_root(const std::string& job);
// Removes the snapshot roots under `base` whose creator ended without removing them (an agent
// killed with its workers, a lost node's processes SIGKILLed): the pid and start time in the
// name no longer name a live process of this pid namespace. Memory file systems hold them
// until reboot otherwise. Roots of live processes, of other pid namespaces, and roots without
// that mark, are left alone. Returns how many it removed.
int sweep_stale_snapshot_roots(const std::string& base);
// The start time of process `pid` in clock ticks after boot (/proc/<pid>/stat, field 22); -1
// when there is no such process.
long long process_start_ticks(pid_t pid);

// Whether `pid` is stopped (SIGSTOP, or a debugger): state T or t in /proc/<pid>/stat.
bool process_stopped(pid_t pid);

}  // namespace cann::elastic
