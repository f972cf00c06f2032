// Serving a shard's rows over TCP; see ps_server.h. One thread per worker connection; the
// shard's state is ShardTables', behind its own mutex.
#include "recsys/ps_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/timer.h"

namespace cann::recsys {
namespace {

// Reads the per-table row lists of a pull or push: returns false on a malformed payload.
// `with_grads`: each table's rows are followed by their (n, C) gradients.
bool decode(const std::vector<char>& payload, int tables, int C, bool with_grads,
            std::vector<std::vector<int64_t>>* rows, std::vector<std::vector<float>>* grads) {
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > payload.size()) return false;
    std::memcpy(dst, payload.data() + at, n);
    at += n;
    return true;
  };
  rows->assign(tables, {});
  if (grads) grads->assign(tables, {});
  for (int t = 0; t < tables; ++t) {
    uint64_t n = 0;
    if (!take(&n, sizeof(n)) || n > payload.size()) return false;
    (*rows)[t].resize(n);
    if (!take((*rows)[t].data(), n * sizeof(int64_t))) return false;
    if (with_grads) {
      (*grads)[t].resize(n * C);
      if (!take((*grads)[t].data(), n * C * sizeof(float))) return false;
    }
  }
  return at == payload.size();
}

}  // namespace

StatusOr<std::unique_ptr<PsServer>> PsServer::start(ShardTables* tables, const ShardConfig& config,
                                                    const std::string& host) {
  CANN_ASSIGN_OR_RETURN(auto listening, listen_on(host));
  return std::unique_ptr<PsServer>(
      new PsServer(tables, config, std::move(listening.first), listening.second));
}

Status PsServer::serve_worker(int fd, int* worker_out) {
  const std::string peer = "a worker of shard " + std::to_string(config_.shard);
  PsHeader h;
  std::vector<char> payload;
  CANN_RETURN_IF_ERROR(recv_frame(fd, &h, &payload, config_.timeout, false, peer));
  if (h.op != static_cast<uint32_t>(PsOp::kHello) || h.worker < 0 || h.worker >= config_.workers)
    return FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                              ": a connection did not introduce itself as one of " +
                              std::to_string(config_.workers) +
                              " workers; hint: workers and shards must run the same job");
  const int worker = *worker_out = h.worker;
  const std::string who =
      "worker " + std::to_string(worker) + " at shard " + std::to_string(config_.shard);
  CANN_RETURN_IF_ERROR(
      send_frame(fd, PsOp::kOk, config_.shard, config_.shards, {}, config_.timeout, who));
  const int tables = static_cast<int>(tables_->tables());
  const int C = tables_->dim();
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<float>> grads;
  std::vector<float> out;
  while (true) {
    Status got = recv_frame(fd, &h, &payload, config_.timeout, true, who);
    if (!got.ok())
      return FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                                ": worker " + std::to_string(worker) +
                                " went away before finishing (" + got.message() + ")");
    bytes_received_ += static_cast<int64_t>(sizeof(h) + payload.size());
    const PsOp op = static_cast<PsOp>(h.op);
    Status done;
    if (op == PsOp::kCheckpoint) {
      if (config_.checkpoint_dir.empty() || payload.size() != 1) {
        done = FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                                  ": a checkpoint request, but the shard has no "
                                  "--checkpoint-dir; hint: start workers and shards alike");
      } else {
        done = tables_->save(config_.checkpoint_dir, h.step, payload[0] != 0);
        if (done.ok()) {
          CANN_RETURN_IF_ERROR(send_frame(fd, PsOp::kOk, 0, h.step, {}, config_.timeout, who));
          continue;
        }
      }
    } else if (op == PsOp::kFinish) {
      CANN_RETURN_IF_ERROR(tables_->finish(worker));
      return send_frame(fd, PsOp::kOk, 0, 0, {}, config_.timeout, who);
    } else if (op == PsOp::kPull || op == PsOp::kRead || op == PsOp::kPush) {
      if (!decode(payload, tables, C, op == PsOp::kPush, &rows,
                  op == PsOp::kPush ? &grads : nullptr)) {
        done = FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                                  ": malformed request from worker " + std::to_string(worker));
      } else if (op != PsOp::kPush) {
        size_t total = 0;
        for (const auto& r : rows) total += r.size();
        out.resize(total * C);
        size_t at = 0;
        for (int t = 0; t < tables && done.ok(); ++t) {
          done = op == PsOp::kPull
                     ? tables_->pull(worker, h.step, t, rows[t].data(), rows[t].size(),
                                     out.data() + at)
                     : tables_->read(t, rows[t].data(), rows[t].size(), out.data() + at);
          at += rows[t].size() * C;
        }
        if (done.ok()) {
          CANN_RETURN_IF_ERROR(send_frame(fd, PsOp::kOk, 0, h.step,
                                          {{out.data(), out.size() * sizeof(float)}},
                                          config_.timeout, who));
          continue;
        }
      } else {
        done = tables_->push(worker, h.step, rows, grads);
        if (done.ok()) {
          CANN_RETURN_IF_ERROR(send_frame(fd, PsOp::kOk, 0, h.step, {}, config_.timeout, who));
          continue;
        }
      }
    } else {
      done = FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                                ": unknown request " + std::to_string(h.op) + " from worker " +
                                std::to_string(worker));
    }
    const std::string& m = done.message();
    (void)send_frame(fd, PsOp::kError, 0, h.step, {{m.data(), m.size()}}, config_.timeout, who);
    return done;
  }
}

Status PsServer::serve(std::chrono::milliseconds accept_timeout) {
  std::vector<PsSocket> conns;
  std::vector<std::thread> threads;
  std::mutex result_mutex;
  Status first_error;
  auto stop_all = [&] {  // with result_mutex held
    for (const PsSocket& c : conns) shutdown(c.fd(), SHUT_RDWR);
  };
  // A lost shard's replacement waits only for the workers still training; it keeps accepting
  // until every worker has finished, since a worker whose finish the lost shard recorded but
  // never answered comes again to say so.
  const int expected = config_.workers - tables_->finished_workers();
  const double deadline = now_seconds() + accept_timeout.count() / 1000.0;
  int accepted = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(result_mutex);
      if (!first_error.ok()) break;
    }
    if (tables_->finished_workers() == config_.workers) break;
    if (accepted < expected && now_seconds() > deadline) {
      std::lock_guard<std::mutex> lock(result_mutex);
      first_error = FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                                       ": only " + std::to_string(accepted) + " of " +
                                       std::to_string(expected) + " workers connected within " +
                                       std::to_string(accept_timeout.count() / 1000) +
                                       " s; hint: see the workers' log for why they did not start");
      stop_all();
      break;
    }
    pollfd p{listener_.fd(), POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const int fd = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Answers are small and awaited: no Nagle delay behind the peer's delayed acknowledgement.
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++accepted;
    {
      std::lock_guard<std::mutex> lock(result_mutex);
      conns.emplace_back(fd);  // under the mutex: a failing thread's stop_all reads conns
    }
    threads.emplace_back([this, fd, &result_mutex, &first_error, &stop_all] {
      int worker = -1;
      Status s = serve_worker(fd, &worker);
      std::lock_guard<std::mutex> lock(result_mutex);
      if (!s.ok() && first_error.ok()) {
        first_error = s;
        stop_all();  // the other connections' threads return at once
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return first_error;
}

}  // namespace cann::recsys
