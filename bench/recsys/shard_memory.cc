// Resident memory of parameter-server shards holding a table far larger than one process's
// share: each shard of SPEC over S shards (one at a time, in a fresh child process each, so one
// shard's pages never count toward another's) admits every row of every table it holds, as a
// job that has seen every id would, and reports its resident set (VmRSS, from the kernel)
// against its share of the tables' values: (rows / S) x width x 4 bytes. The rest is the
// optimizer state, the rows' admission records and the binary. Target: every shard's resident
// set within 10% of its share; exit status 1 when a shard misses it.
//
//   shard_memory SPEC SHARDS
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "recsys/ps_shard.h"
#include "recsys/rec_spec.h"

using namespace cann::recsys;

namespace {

double vm_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shard_memory SPEC SHARDS\n");
    return 2;
  }
  auto spec = load_rec_spec(argv[1]);
  if (!spec.ok()) {
    std::fprintf(stderr, "shard_memory: %s\n", spec.status().message().c_str());
    return 2;
  }
  const int S = std::atoi(argv[2]);
  const int C = spec->embedding_dim;
  std::printf("{\"shards\": %d, \"rows\": %lld, \"width\": %d, \"per_shard\": [", S,
              static_cast<long long>(spec->embedding_rows()), C);
  std::fflush(stdout);
  for (int k = 0; k < S; ++k) {
    const pid_t pid = fork();
    if (pid == 0) {
      const double before = vm_rss_mib();
      ShardConfig config;
      config.shard = k;
      config.shards = S;
      ShardTables tables(*spec, config);
      int64_t held = 0;
      std::vector<int64_t> rows;
      std::vector<float> out;
      for (int t = 0; t < spec->sparse_features; ++t) {
        held += tables.local_rows(t);
        for (int64_t r0 = k; r0 < spec->table_rows[t]; r0 += int64_t{S} * 65536) {
          rows.clear();
          for (int64_t r = r0; r < spec->table_rows[t] && rows.size() < 65536; r += S)
            rows.push_back(r);
          out.resize(rows.size() * C);
          if (!tables.pull(0, 1, t, rows.data(), rows.size(), out.data()).ok()) _exit(1);
        }
      }
      const double values_mib = static_cast<double>(held) * C * 4 / (1 << 20);
      std::printf("%s{\"shard\": %d, \"admitted_rows\": %lld, \"values_mib\": %.1f, "
                  "\"rss_mib\": %.1f, \"rss_before_mib\": %.1f}",
                  k ? ", " : "", k, static_cast<long long>(tables.admitted_rows()), values_mib,
                  vm_rss_mib(), before);
      std::fflush(stdout);
      if (tables.admitted_rows() != held) _exit(1);
      _exit(vm_rss_mib() <= 1.10 * values_mib ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
      std::printf("]}\nFAIL target: shard %d's resident set is more than 10%% above its share\n", k);
      return 1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "shard_memory: shard %d failed\n", k);
      return 1;
    }
  }
  std::printf("]}\nPASS target: every shard's resident set within 10%% of its share\n");
  return 0;
}
