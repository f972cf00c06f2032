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
#include "core/fs.h"
#include "core/json_line.h"
#include "core/timer.h"
#include "train/distributed.h"

namespace cann::cli {
namespace {

struct Row {
  std::string backend, op;
  int nproc = 0;
  size_t size_bytes = 0;
  double time_s = 0;
  double algbw = 0, busbw = 0;
};

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

Status run_comm_bench_worker(const CommBenchConfig& config, const train::DistEnv& env) {
  const bool leader = env.rank == 0;
  const int P = env.world_size;
  const comm::Options opts{std::chrono::milliseconds(static_cast<long>(config.timeout_s * 1000)),
                           "bench"};
  std::vector<Row> rows;
  std::vector<float> in, out;
  auto report = [&](const Row& r) {
    rows.push_back(r);
    if (!leader || config.json) return;
    std::printf("%-13s %-14s %10s %12zu %12.1f %11.3f %11.3f\n", r.backend.c_str(), r.op.c_str(),
                human_bytes(r.size_bytes).c_str(), r.size_bytes / 4, r.time_s * 1e6, r.algbw,
                r.busbw);
    std::fflush(stdout);
  };
  if (leader && !config.json) {
    std::printf(
        "# cann-train bench comm: %d ranks, fp32, sizes %s..%s x%d, results validated "
        "before timing\n",
        P, human_bytes(config.min_bytes).c_str(), human_bytes(config.max_bytes).c_str(),
        config.factor);
    std::printf("%-13s %-14s %10s %12s %12s %11s %11s\n", "# backend", "op", "size", "count",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  }
  for (const std::string& backend : config.backends) {
    train::DistEnv e = env;
    e.job_id = env.job_id + "/bench-" + backend;
    train::CommConfig cc;
    cc.backend = backend;
    cc.timeout_s = config.timeout_s;
    CANN_ASSIGN_OR_RETURN(auto group, train::make_world_group(e, cc));
    for (const std::string& op : config.ops) {
      for (size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
        const size_t count = per_rank_count(op, bytes, P);
        const size_t buffer = op == "allreduce" ? count : count * P;
        in.assign(buffer, 0.0f);
        out.assign(buffer, 0.0f);
        CANN_RETURN_IF_ERROR(validate_collective(*group, op, count, in, out, opts));
        CANN_ASSIGN_OR_RETURN(
            double t, time_collective(
                          *group, [&] { return run_collective(*group, op, count, in, out, opts); },
                          config.seconds_per_size));
        Row r{backend, op, P, buffer * 4, t, 0, 0};
        r.algbw = static_cast<double>(r.size_bytes) / t / 1e9;
        r.busbw = r.algbw * bus_factor(op, P);
        report(r);
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
    CANN_ASSIGN_OR_RETURN(auto sync, train::make_world_group(e, cc));
    for (size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
      const size_t count = bytes / 4;
      in.assign(count, 0.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(env.rank + 1 + i % 7);
      CANN_RETURN_IF_ERROR(raw->allreduce(in, count));
      for (size_t i = 0; i < count; ++i)
        if (in[i] != static_cast<float>(P * (P + 1) / 2 + P * (i % 7)))
          return Internal("raw Gloo all-reduce gave a wrong value at element " + std::to_string(i));
      CANN_ASSIGN_OR_RETURN(
          double t, time_collective(
                        *sync, [&] { return raw->allreduce(in, count); }, config.seconds_per_size));
      Row r{"gloo-raw", "allreduce", P, count * 4, t, 0, 0};
      r.algbw = static_cast<double>(r.size_bytes) / t / 1e9;
      r.busbw = r.algbw * bus_factor("allreduce", P);
      report(r);
      if (bytes > config.max_bytes / config.factor) break;
    }
  }
  if (leader && config.json) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      JsonLine j;
      j.add("backend", r.backend)
          .add("op", r.op)
          .add("nproc", r.nproc)
          .add("size_bytes", static_cast<int64_t>(r.size_bytes))
          .add("time_s", r.time_s)
          .add("algbw_GBps", r.algbw)
          .add("busbw_GBps", r.busbw);
      std::printf("%s%s", i ? ",\n " : "", j.str().c_str());
    }
    std::printf("]\n");
  }
  return OkStatus();
}

}  // namespace cann::cli
