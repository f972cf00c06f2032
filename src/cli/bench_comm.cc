// The comm benchmark's worker: validate each collective once, then time it; rank 0 reports.
// Bandwidths follow nccl-tests (PERFORMANCE.md there): algbw = size / time, and
//   busbw = algbw * 2(P-1)/P  for all-reduce,
//   busbw = algbw * (P-1)/P   for all-gather, reduce-scatter and all-to-all,
// where size is the whole buffer: for all-gather the gathered output, for reduce-scatter the
// input, for all-to-all either side.
#include "cli/bench_comm.h"

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "comm/group.h"
#include "comm/store.h"
#include "core/fs.h"
#include "core/host.h"
#include "core/json_line.h"
#include "core/machine_load.h"
#include "core/threads.h"
#include "core/timer.h"
#include "train/distributed.h"

namespace cann::cli {
namespace {

double bus_factor(const std::string& op, int P) {
  if (P <= 1) return 1.0;
  return op == "allreduce" ? 2.0 * (P - 1) / P : static_cast<double>(P - 1) / P;
}

}  // namespace

size_t per_rank_count(const std::string& op, size_t bytes, int P) {
  const size_t n = bytes / 4;
  if (op == "allreduce") return n;
  return std::max<size_t>(1, n / P);  // gather/scatter/all-to-all: the buffer holds P blocks
}

std::string human_bytes(size_t b) {
  char buf[32];
  if (b >= (1u << 30))
    std::snprintf(buf, sizeof(buf), "%zuG", b >> 30);
  else if (b >= (1u << 20))
    std::snprintf(buf, sizeof(buf), "%zuM", b >> 20);
  else if (b >= (1u << 10))
    std::snprintf(buf, sizeof(buf), "%zuK", b >> 10);
  else
    std::snprintf(buf, sizeof(buf), "%zu", b);
  return buf;
}

Status validate_collective(comm::Group& g, const std::string& op, size_t count,
                           std::vector<float>& in, std::vector<float>& out,
                           const comm::Options& opts) {
  const int P = g.size(), me = g.rank();
  Status s;
  if (op == "allreduce") {
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(me + 1 + i % 7);
    s = g.allreduce(in.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum, opts)
            ->wait(opts.timeout);
    for (size_t i = 0; s.ok() && i < count; ++i)
      if (in[i] != static_cast<float>(P * (P + 1) / 2 + P * (i % 7)))
        s = Internal("allreduce gave a wrong value at element " + std::to_string(i));
  } else if (op == "allgather") {
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(me * 1000 + i % 13);
    s = g.allgather(out.data(), in.data(), count, comm::DataType::kFloat32, opts)
            ->wait(opts.timeout);
    for (size_t i = 0; s.ok() && i < count * P; ++i)
      if (out[i] != static_cast<float>((i / count) * 1000 + (i % count) % 13))
        s = Internal("allgather gave a wrong value at element " + std::to_string(i));
  } else if (op == "reduce_scatter") {
    for (size_t i = 0; i < count * P; ++i)
      in[i] = static_cast<float>(me + (i / count) + (i % count) % 5);
    s = g.reduce_scatter(out.data(), in.data(), count, comm::DataType::kFloat32,
                         comm::ReduceOp::kSum, opts)
            ->wait(opts.timeout);
    for (size_t i = 0; s.ok() && i < count; ++i)
      if (out[i] != static_cast<float>(P * (P - 1) / 2 + P * (me + i % 5)))
        s = Internal("reduce_scatter gave a wrong value at element " + std::to_string(i));
  } else {
    for (size_t i = 0; i < count * P; ++i)
      in[i] = static_cast<float>(me * 100 + (i / count) + (i % count) % 3);
    s = g.alltoall(out.data(), in.data(), count, comm::DataType::kFloat32, opts)
            ->wait(opts.timeout);
    for (size_t i = 0; s.ok() && i < count * P; ++i)
      if (out[i] != static_cast<float>((i / count) * 100 + me + (i % count) % 3))
        s = Internal("alltoall gave a wrong value at element " + std::to_string(i));
  }
  if (!s.ok())
    return Status(s.code(), g.backend() + " " + op + " of " + std::to_string(count) +
                                " elements per rank: " + s.message());
  return OkStatus();
}

Status run_collective(comm::Group& g, const std::string& op, size_t count, std::vector<float>& in,
                      std::vector<float>& out, const comm::Options& opts) {
  std::shared_ptr<comm::Work> w;
  if (op == "allreduce")
    w = g.allreduce(in.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum, opts);
  else if (op == "allgather")
    w = g.allgather(out.data(), in.data(), count, comm::DataType::kFloat32, opts);
  else if (op == "reduce_scatter")
    w = g.reduce_scatter(out.data(), in.data(), count, comm::DataType::kFloat32,
                         comm::ReduceOp::kSum, opts);
  else
    w = g.alltoall(out.data(), in.data(), count, comm::DataType::kFloat32, opts);
  return w->wait(opts.timeout);
}

StatusOr<double> time_collective(comm::Group& g, const std::function<Status()>& call,
                                 double budget) {
  CANN_RETURN_IF_ERROR(call());  // warm-up
  const double t0 = now_seconds();
  CANN_RETURN_IF_ERROR(call());
  float one = static_cast<float>(now_seconds() - t0);
  // Every rank must run the same number of iterations: agree on the slowest first estimate.
  CANN_RETURN_IF_ERROR(
      g.allreduce(&one, 1, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  const int iters = std::clamp(static_cast<int>(budget / std::max(one, 1e-6f)), 3, 1000);
  CANN_RETURN_IF_ERROR(g.barrier()->wait());
  const double t1 = now_seconds();
  for (int i = 0; i < iters; ++i) CANN_RETURN_IF_ERROR(call());
  float avg = static_cast<float>((now_seconds() - t1) / iters);
  CANN_RETURN_IF_ERROR(
      g.allreduce(&avg, 1, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  return static_cast<double>(avg);
}

namespace {

// Raw Gloo: its own TCP device, its own file-store rendezvous, its AllreduceRing algorithm.
class RawGloo {
 public:
  static StatusOr<std::unique_ptr<RawGloo>> connect(const train::DistEnv& env) {
    const std::string prefix = "file://";
    if (env.store_url.rfind(prefix, 0) != 0)
      return FailedPrecondition("raw Gloo peer needs the local file store");
    std::unique_ptr<RawGloo> r(new RawGloo);
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      r->device_ = gloo::transport::tcp::CreateDevice(attr);
      // A directory of its own beside cann-train's store: the two stores' files never mix.
      const std::string dir = env.store_url.substr(prefix.size()) + ".raw-gloo";
      Status made = make_dirs(dir);
      if (!made.ok()) return made;
      gloo::rendezvous::FileStore file(dir);
      gloo::rendezvous::PrefixStore store("raw-gloo-" + env.job_id, file);
      r->context_ = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
      r->context_->connectFullMesh(store, r->device_);
    } catch (const std::exception& e) {
      return IoError(std::string("raw Gloo setup failed: ") + e.what());
    }
    return r;
  }
  Status allreduce(std::vector<float>& data, size_t count) {
    try {
      if (!algo_ || count != count_) {
        algo_ = std::make_unique<gloo::AllreduceRing<float>>(
            context_, std::vector<float*>{data.data()}, static_cast<int>(count));
        count_ = count;
      }
      algo_->run();
    } catch (const std::exception& e) {
      return IoError(std::string("raw Gloo all-reduce failed: ") + e.what());
    }
    return OkStatus();
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<gloo::AllreduceRing<float>> algo_;
  size_t count_ = 0;
};

}  // namespace

Status parse_size_range(const std::string& text, size_t* min_bytes, size_t* max_bytes) {
  auto parse = [](std::string s, size_t* out) {
    if (s.empty()) return false;
    size_t mult = 1;
    const char u = static_cast<char>(std::toupper(s.back()));
    if (u == 'K' || u == 'M' || u == 'G') {
      mult = u == 'K' ? 1u << 10 : u == 'M' ? 1u << 20 : 1u << 30;
      s.pop_back();
    }
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v == 0) return false;
    *out = static_cast<size_t>(v) * mult;
    return true;
  };
  const size_t colon = text.find(':');
  const std::string a = text.substr(0, colon),
                    b = colon == std::string::npos ? a : text.substr(colon + 1);
  if (!parse(a, min_bytes) || !parse(b, max_bytes) || *min_bytes > *max_bytes)
    return InvalidArgument("--sizes '" + text +
                           "': expected MIN:MAX with MIN <= MAX, e.g. 4K:256M (K, M, G = 1024^n)");
  return OkStatus();
}

namespace {

// A row from the repeats' times (seconds per call): the median, with the smallest and largest.
CommRow timed_row(const std::string& backend, const std::string& op, int P, size_t size_bytes,
                  const std::vector<double>& times) {
  CommRow r{backend, op, P, size_bytes};
  r.time_s = median(times);
  r.time_min_s = *std::min_element(times.begin(), times.end());
  r.time_max_s = *std::max_element(times.begin(), times.end());
  r.algbw = static_cast<double>(size_bytes) / r.time_s / 1e9;
  r.busbw = r.algbw * bus_factor(op, P);
  return r;
}

// Each row's bus bandwidth against raw Gloo's all-reduce of the same size (all-reduce rows).
void set_raw_ratios(std::vector<CommRow>& rows) {
  for (CommRow& r : rows) {
    if (r.op != "allreduce" || r.backend == "gloo-raw") continue;
    for (const CommRow& raw : rows)
      if (raw.backend == "gloo-raw" && raw.size_bytes == r.size_bytes && raw.busbw > 0)
        r.vs_raw = r.busbw / raw.busbw;
  }
}

}  // namespace

CommTarget judge_comm_target(const std::vector<CommRow>& rows) {
  CommTarget t;
  for (const CommRow& r : rows) {
    if (r.backend != "shm" || r.op != "allreduce" || r.vs_raw <= 0 ||
        r.size_bytes < kCommTargetBytes || r.size_bytes < t.size_bytes)
      continue;
    t.judged = true;
    t.size_bytes = r.size_bytes;
    t.ratio = r.vs_raw;
  }
  t.met = t.judged && t.ratio >= kCommTargetRatio;
  return t;
}

StatusOr<bool> run_comm_bench_worker(const CommBenchConfig& config, const train::DistEnv& env) {
  const bool leader = env.rank == 0;
  const int P = env.world_size;
  const comm::Options opts{std::chrono::milliseconds(static_cast<long>(config.timeout_s * 1000)),
                           "bench"};
  const LoadReading load_before = read_load();
  std::vector<CommRow> rows;
  std::vector<float> in, out;
  auto repeats = [&](comm::Group& g,
                     const std::function<Status()>& call) -> StatusOr<std::vector<double>> {
    std::vector<double> times;
    for (int k = 0; k < config.repeat; ++k) {
      CANN_ASSIGN_OR_RETURN(double t, time_collective(g, call, config.seconds_per_size));
      times.push_back(t);
    }
    return times;
  };
  std::shared_ptr<comm::Store> store;  // the job's, for the parting below
  for (const std::string& backend : config.backends) {
    train::DistEnv e = env;
    e.job_id = env.job_id + "/bench-" + backend;
    train::CommConfig cc;
    cc.backend = backend;
    cc.timeout_s = config.timeout_s;
    CANN_ASSIGN_OR_RETURN(auto group, train::make_world_group(e, cc, &store));
    for (const std::string& op : config.ops) {
      for (size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
        const size_t count = per_rank_count(op, bytes, P);
        const size_t buffer = op == "allreduce" ? count : count * P;
        in.assign(buffer, 0.0f);
        out.assign(buffer, 0.0f);
        CANN_RETURN_IF_ERROR(validate_collective(*group, op, count, in, out, opts));
        CANN_ASSIGN_OR_RETURN(std::vector<double> times, repeats(*group, [&] {
                                return run_collective(*group, op, count, in, out, opts);
                              }));
        rows.push_back(timed_row(backend, op, P, buffer * 4, times));
        if (bytes > config.max_bytes / config.factor) break;
      }
    }
  }
  if (config.raw_gloo &&
      std::find(config.ops.begin(), config.ops.end(), "allreduce") != config.ops.end()) {
    CANN_ASSIGN_OR_RETURN(auto raw, RawGloo::connect(env));
    // The raw peer synchronizes through our own world group for timing agreement only.
    train::DistEnv e = env;
    e.job_id = env.job_id + "/bench-raw";
    train::CommConfig cc;
    cc.backend = "gloo";
    CANN_ASSIGN_OR_RETURN(auto sync, train::make_world_group(e, cc, &store));
    for (size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
      const size_t count = bytes / 4;
      in.assign(count, 0.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(env.rank + 1 + i % 7);
      CANN_RETURN_IF_ERROR(raw->allreduce(in, count));
      for (size_t i = 0; i < count; ++i)
        if (in[i] != static_cast<float>(P * (P + 1) / 2 + P * (i % 7)))
          return Internal("raw Gloo all-reduce gave a wrong value at element " + std::to_string(i));
      CANN_ASSIGN_OR_RETURN(std::vector<double> times,
                            repeats(*sync, [&] { return raw->allreduce(in, count); }));
      rows.push_back(timed_row("gloo-raw", "allreduce", P, count * 4, times));
      if (bytes > config.max_bytes / config.factor) break;
    }
  }
  // No rank leaves before every rank has finished its last collective.
  if (store) CANN_RETURN_IF_ERROR(train::leave_together(*store, env, "bench-comm", opts.timeout));
  set_raw_ratios(rows);
  const CommTarget target = judge_comm_target(rows);
  if (!leader) return !target.judged || target.met;
  const LoadReading load_after = read_load();
  if (config.json) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const CommRow& r = rows[i];
      JsonLine j;
      j.add("backend", r.backend)
          .add("op", r.op)
          .add("nproc", r.nproc)
          .add("size_bytes", static_cast<int64_t>(r.size_bytes))
          .add("time_s", r.time_s)
          .add("time_min_s", r.time_min_s)
          .add("time_max_s", r.time_max_s)
          .add("algbw_GBps", r.algbw)
          .add("busbw_GBps", r.busbw);
      if (r.vs_raw > 0) j.add("busbw_vs_raw_gloo", r.vs_raw);
      std::printf("%s%s", i ? ",\n " : "", j.str().c_str());
    }
    std::printf("]\n");
    return !target.judged || target.met;
  }
  std::printf(
      "# cann-train bench comm: %d ranks, fp32, sizes %s..%s x%d, results validated before "
      "timing; each size timed %d times (each over %.2f s), median and min..max\n",
      P, human_bytes(config.min_bytes).c_str(), human_bytes(config.max_bytes).c_str(),
      config.factor, config.repeat, config.seconds_per_size);
  std::printf("# machine: %s\n", machine_description().c_str());
  std::printf("%-13s %-14s %10s %12s %12s %21s %11s %11s %7s\n", "# backend", "op", "size", "count",
              "time(us)", "min..max(us)", "algbw(GB/s)", "busbw(GB/s)", "vs raw");
  for (const CommRow& r : rows) {
    char range[64], ratio[16] = "-";
    std::snprintf(range, sizeof(range), "%.1f..%.1f", r.time_min_s * 1e6, r.time_max_s * 1e6);
    if (r.vs_raw > 0) std::snprintf(ratio, sizeof(ratio), "%.2fx", r.vs_raw);
    const size_t count = per_rank_count(r.op, r.size_bytes, P);
    std::printf("%-13s %-14s %10s %12zu %12.1f %21s %11.3f %11.3f %7s\n", r.backend.c_str(),
                r.op.c_str(), human_bytes(r.size_bytes).c_str(), count, r.time_s * 1e6, range,
                r.algbw, r.busbw, ratio);
  }
  std::printf("targets:\n");
  if (target.judged) {
    std::printf("  %s  shm all-reduce at %s: bus bandwidth %.2fx raw Gloo's (at least %.0fx)\n",
                target.met ? "PASS" : "FAIL", human_bytes(target.size_bytes).c_str(), target.ratio,
                kCommTargetRatio);
  } else {
    std::printf(
        "  none judged: the shm all-reduce against raw Gloo at %s or more needs the shm "
        "backend, allreduce and --sizes reaching %s\n",
        human_bytes(kCommTargetBytes).c_str(), human_bytes(kCommTargetBytes).c_str());
  }
  std::printf("1-minute load average %.2f at the start, %.2f at the end (%d cores, %d ranks)\n",
              load_before.load1, load_after.load1, hardware_threads(), P);
  std::fflush(stdout);
  return !target.judged || target.met;
}

}  // namespace cann::cli
