// comm_shm_bench: fp32 allreduce busbw of the shm backend against raw Gloo's ring allreduce
// (TCP over loopback) and against this machine's memcpy bandwidth (one process alone, and P
// processes copying at once, which is the roofline for P ranks that each must read and write
// their whole buffer), all measured in the same run.
// Ranks are forked processes; the shm group rendezvouses through a file store and Gloo through
// its own FileStore, both in a fresh temporary directory. Each size is validated first (every
// rank contributes rank + 1, so every element must equal P(P+1)/2), then timed.
//
//   comm_shm_bench [--nproc P] [--sizes-mib 1,16,64] [--seconds S]
//
// busbw = algbw * 2(P-1)/P with algbw = bytes / time (the nccl-tests convention), so busbw is
// comparable across P and directly comparable to a copy bandwidth.
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/store.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One rank's timed loop, shared by both peers: validate once, warm up, then run for about
// `budget` seconds. Returns seconds per call (negative when validation failed).
double time_allreduce(std::vector<float>& data, int rank, int world, double budget,
                      const std::function<void()>& allreduce, const std::function<void()>& sync) {
  std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
  allreduce();
  const float want = static_cast<float>(world * (world + 1) / 2);
  for (size_t i = 0; i < data.size(); i += 1 + data.size() / 4099)
    if (data[i] != want) return -1;
  if (data.back() != want) return -1;
  allreduce();  // warm
  sync();
  int iters = 0;
  const auto t0 = Clock::now();
  // Rank 0 decides when to stop and broadcasts it through the data's first element, so every
  // rank runs the same number of calls.
  while (true) {
    allreduce();
    ++iters;
    data[0] = (rank == 0 && seconds_since(t0) > budget) ? 1.0f : 0.0f;
    allreduce();
    ++iters;
    if (data[0] != 0.0f) break;
  }
  return seconds_since(t0) / iters;
}

// Forks `world` ranks running fn(rank) -> seconds per call; returns rank 0's figure (or -1).
double run_ranks(int world, const std::string& dir, const std::function<double(int)>& fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      double t = -1;
      try {
        t = fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::ofstream(dir + "/result" + std::to_string(r)) << t;
      _exit(t > 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double t = -1;
  std::ifstream(dir + "/result0") >> t;
  return ok ? t : -1;
}

double shm_allreduce(int world, size_t count, const std::string& dir, int run, double budget) {
  return run_ranks(world, dir, [&](int rank) -> double {
    auto store = cann::comm::open_store("file://" + dir + "/store");
    if (!store.ok()) throw std::runtime_error(store.status().message());
    cann::comm::GroupConfig c;
    c.backend = "shm";
    c.store = *store;
    c.prefix = "bench/shm/" + std::to_string(run);
    c.rank = rank;
    c.size = world;
    auto group = cann::comm::create_group(c);
    if (!group.ok()) throw std::runtime_error(group.status().message());
    std::vector<float> data(count);
    auto check = [](const cann::Status& s) {
      if (!s.ok()) throw std::runtime_error(s.message());
    };
    return time_allreduce(
        data, rank, world, budget,
        [&] {
          check((*group)
                    ->allreduce(data.data(), count, cann::comm::DataType::kFloat32,
                                cann::comm::ReduceOp::kSum)
                    ->wait());
        },
        [&] { check((*group)->barrier()->wait()); });
  });
}

double gloo_allreduce(int world, size_t count, const std::string& dir, int run, double budget) {
  return run_ranks(world, dir, [&](int rank) -> double {
    const std::string path = dir + "/gloo" + std::to_string(run);
    std::filesystem::create_directories(path);
    gloo::rendezvous::FileStore store(path);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->connectFullMesh(store, device);
    std::vector<float> data(count);
    gloo::AllreduceRing<float> ring(context, {data.data()}, static_cast<int>(count));
    float flag = 0;
    gloo::AllreduceRing<float> barrier(context, {&flag}, 1);
    return time_allreduce(
        data, rank, world, budget, [&] { ring.run(); }, [&] { barrier.run(); });
  });
}

// memcpy bandwidth (bytes copied per second, averaged over `budget` seconds of copies) on
// buffers of `bytes`, with `procs` processes copying at once: one process is the single-core
// figure; P processes show what the memory system gives P ranks that all stream their buffers
// at the same time (the copies run long enough to overlap).
double memcpy_bandwidth(size_t bytes, int procs, const std::string& dir, double budget) {
  const double t = run_ranks(procs, dir, [&](int) -> double {
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    std::memcpy(dst.data(), src.data(), bytes);  // warm
    int copies = 0;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < budget) {
      std::memcpy(dst.data(), src.data(), bytes);
      ++copies;
    }
    return dst[bytes - 1] == 1 ? seconds_since(t0) / copies : -1;
  });
  return t > 0 ? bytes / t : -1;
}

}  // namespace

int main(int argc, char** argv) {
  int world = 2;
  std::vector<size_t> sizes_mib = {1, 16, 64};
  double budget = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--nproc") {
      world = std::atoi(argv[i + 1]);
    } else if (flag == "--seconds") {
      budget = std::atof(argv[i + 1]);
    } else if (flag == "--sizes-mib") {
      sizes_mib.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* end = nullptr;
        sizes_mib.push_back(std::strtoull(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--nproc P] [--sizes-mib 1,16,64] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  if (world < 2) {
    std::fprintf(stderr, "comm_shm_bench: --nproc must be at least 2\n");
    return 2;
  }
  std::string templ = (std::filesystem::temp_directory_path() / "comm-shm-bench-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "comm_shm_bench: cannot create a temporary directory\n");
    return 1;
  }
  const std::string dir = templ;
  const double factor = 2.0 * (world - 1) / world;
  const double copy = memcpy_bandwidth(size_t{64} << 20, 1, dir, budget);
  const double copy_all = memcpy_bandwidth(size_t{64} << 20, world, dir, budget);
  std::printf(
      "comm_shm_bench: fp32 allreduce, %d processes; memcpy of 64 MiB: %.2f GB/s alone, "
      "%.2f GB/s each with %d processes copying at once\n",
      world, copy / 1e9, copy_all / 1e9, world);
  std::printf("%10s %12s %12s %12s %12s %9s %11s %11s\n", "size", "shm time", "shm algbw",
              "shm busbw", "gloo busbw", "shm/gloo", "shm/memcpy", "shm/memcpyP");
  int run = 0;
  bool ok = true;
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20;
    const size_t count = bytes / sizeof(float);
    const double t_shm = shm_allreduce(world, count, dir, run, budget);
    const double t_gloo = gloo_allreduce(world, count, dir, run, budget);
    ++run;
    if (t_shm <= 0 || t_gloo <= 0) {
      std::printf("%7zu MiB  validation failed (shm %s, gloo %s)\n", mib,
                  t_shm > 0 ? "ok" : "FAILED", t_gloo > 0 ? "ok" : "FAILED");
      ok = false;
      continue;
    }
    const double shm_bus = bytes / t_shm * factor, gloo_bus = bytes / t_gloo * factor;
    std::printf("%6zu MiB %9.3f ms %7.2f GB/s %7.2f GB/s %7.2f GB/s %8.2fx %10.2fx %10.2fx\n", mib,
                t_shm * 1e3, bytes / t_shm / 1e9, shm_bus / 1e9, gloo_bus / 1e9, shm_bus / gloo_bus,
                shm_bus / copy, shm_bus / copy_all);
  }
  std::filesystem::remove_all(dir);
  std::printf("validation: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
