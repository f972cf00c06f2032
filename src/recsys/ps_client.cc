// The worker's parameter-server client; see ps_client.h.
#include "recsys/ps_client.h"

#include <cstring>

namespace cann::recsys {

StatusOr<std::unique_ptr<PsClient>> PsClient::connect(const RecSpec& spec, int worker,
                                                      const std::vector<std::string>& addresses,
                                                      std::chrono::milliseconds timeout,
                                                      bool pulls_wait) {
  auto c = std::unique_ptr<PsClient>(new PsClient(spec, worker, timeout));
  c->pulls_wait_ = pulls_wait;
  c->addresses_ = addresses;
  c->shards_.resize(addresses.size());
  for (size_t s = 0; s < addresses.size(); ++s)
    CANN_RETURN_IF_ERROR(c->connect_shard(static_cast<int>(s), addresses[s]));
  return c;
}

Status PsClient::connect_shard(int s, const std::string& address) {
  const std::string a = address.substr(0, address.find('#'));
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("parameter-server shard " + std::to_string(s) + " address '" + a +
                           "' is not host:port");
  CANN_ASSIGN_OR_RETURN(PsSocket sock,
                        connect_to(a.substr(0, colon), std::stoi(a.substr(colon + 1)), timeout_));
  const std::string peer = "parameter-server shard " + std::to_string(s) + " at " + a;
  CANN_RETURN_IF_ERROR(send_frame(sock.fd(), PsOp::kHello, worker_, 0, {}, timeout_, peer));
  PsHeader h;
  std::vector<char> payload;
  CANN_RETURN_IF_ERROR(recv_frame(sock.fd(), &h, &payload, timeout_, false, peer));
  if (h.op != static_cast<uint32_t>(PsOp::kOk) || h.worker != s ||
      h.step != static_cast<int>(addresses_.size()))
    return FailedPrecondition(peer + " answered as shard " + std::to_string(h.worker) + " of " +
                              std::to_string(h.step) +
                              "; hint: workers and shards must agree on --ps-shards");
  shards_[s] = std::move(sock);
  addresses_[s] = address;
  return OkStatus();
}

void PsClient::split(const PulledRows& pulled) {
  const int S = static_cast<int>(shards_.size()), F = spec_.sparse_features;
  positions_.assign(S, std::vector<std::vector<int32_t>>(F));
  rows_.assign(S, std::vector<std::vector<int64_t>>(F));
  counts_.assign(S, std::vector<uint64_t>(F));
  for (int t = 0; t < F; ++t)
    for (size_t u = 0; u < pulled[t].row_ids.size(); ++u) {
      const int64_t r = pulled[t].row_ids[u];
      const int s = static_cast<int>(r % S);
      positions_[s][t].push_back(static_cast<int32_t>(u));
      rows_[s][t].push_back(r);
    }
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < F; ++t) counts_[s][t] = rows_[s][t].size();
}

Status PsClient::round_trip(PsOp op,
                            const std::vector<std::vector<std::pair<const void*, size_t>>>& parts,
                            std::vector<std::vector<char>>* answers) {
  const int S = static_cast<int>(shards_.size());
  answers->resize(S);
  const bool may_wait = (op == PsOp::kPush && !pulls_wait_) || (op == PsOp::kPull && pulls_wait_) ||
                        op == PsOp::kCheckpoint;
  const auto answer_timeout = may_wait ? 2 * timeout_ : timeout_;
  auto peer = [&](int s) {
    return "parameter-server shard " + std::to_string(s) + " at " +
           addresses_[s].substr(0, addresses_[s].find('#'));
  };
  auto send = [&](int s) {
    for (const auto& [p, n] : parts[s]) bytes_sent_ += static_cast<int64_t>(n);
    bytes_sent_ += sizeof(PsHeader);
    return send_frame(shards_[s].fd(), op, worker_, step_, parts[s], timeout_, peer(s));
  };
  // Transport failures (a lost shard) are kept per shard; an answer that is an error ends it.
  auto receive = [&](int s, Status* lost) -> Status {
    PsHeader h;
    Status got = recv_frame(shards_[s].fd(), &h, &(*answers)[s], answer_timeout, false, peer(s));
    if (!got.ok()) {
      *lost = got;
      return OkStatus();
    }
    bytes_received_ += static_cast<int64_t>(sizeof(h) + (*answers)[s].size());
    if (h.op == static_cast<uint32_t>(PsOp::kError))
      return FailedPrecondition(std::string((*answers)[s].begin(), (*answers)[s].end()));
    if (h.op != static_cast<uint32_t>(PsOp::kOk))
      return FailedPrecondition(peer(s) + " answered with an unknown frame");
    return OkStatus();
  };
  // Every request goes out before any answer is awaited: a synchronous push waits on the
  // other workers, whose pushes must not wait on this worker's.
  std::vector<Status> lost(S);
  for (int s = 0; s < S; ++s) lost[s] = send(s);
  for (int s = 0; s < S; ++s)
    if (lost[s].ok()) CANN_RETURN_IF_ERROR(receive(s, &lost[s]));
  for (int s = 0; s < S; ++s) {
    while (!lost[s].ok()) {
      if (!relocate_) return lost[s];
      CANN_ASSIGN_OR_RETURN(const std::string address, relocate_(s, addresses_[s]));
      ++reconnects_;
      lost[s] = connect_shard(s, address);
      if (lost[s].ok()) lost[s] = send(s);
      if (lost[s].ok()) CANN_RETURN_IF_ERROR(receive(s, &lost[s]));
    }
  }
  return OkStatus();
}

Status PsClient::fetch(PsOp op, PulledRows* pulled) {
  const int S = static_cast<int>(shards_.size()), F = spec_.sparse_features;
  const int C = spec_.embedding_dim;
  split(*pulled);
  std::vector<std::vector<std::pair<const void*, size_t>>> parts(S);
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < F; ++t) {
      parts[s].push_back({&counts_[s][t], sizeof(uint64_t)});
      parts[s].push_back({rows_[s][t].data(), rows_[s][t].size() * sizeof(int64_t)});
    }
  std::vector<std::vector<char>> answers;
  CANN_RETURN_IF_ERROR(round_trip(op, parts, &answers));
  for (int t = 0; t < F; ++t) (*pulled)[t].rows.resize((*pulled)[t].row_ids.size() * C);
  for (int s = 0; s < S; ++s) {
    size_t expected = 0;
    for (int t = 0; t < F; ++t) expected += rows_[s][t].size() * C * sizeof(float);
    if (answers[s].size() != expected)
      return FailedPrecondition("parameter-server shard " + std::to_string(s) +
                                " answered a pull with " + std::to_string(answers[s].size()) +
                                " bytes, not " + std::to_string(expected));
    const char* at = answers[s].data();
    for (int t = 0; t < F; ++t)
      for (int32_t u : positions_[s][t]) {
        std::memcpy((*pulled)[t].rows.data() + static_cast<size_t>(u) * C, at, C * sizeof(float));
        at += C * sizeof(float);
      }
  }
  return OkStatus();
}

Status PsClient::push(const PulledRows& pulled, const RowGrads& grads) {
  const int S = static_cast<int>(shards_.size()), F = spec_.sparse_features;
  const int C = spec_.embedding_dim;
  split(pulled);
  grads_.assign(S, std::vector<std::vector<float>>(F));
  std::vector<std::vector<std::pair<const void*, size_t>>> parts(S);
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < F; ++t) {
      std::vector<float>& g = grads_[s][t];
      g.resize(positions_[s][t].size() * C);
      for (size_t i = 0; i < positions_[s][t].size(); ++i)
        std::memcpy(g.data() + i * C,
                    grads[t].data() + static_cast<size_t>(positions_[s][t][i]) * C,
                    C * sizeof(float));
      parts[s].push_back({&counts_[s][t], sizeof(uint64_t)});
      parts[s].push_back({rows_[s][t].data(), rows_[s][t].size() * sizeof(int64_t)});
      parts[s].push_back({g.data(), g.size() * sizeof(float)});
    }
  std::vector<std::vector<char>> answers;
  return round_trip(PsOp::kPush, parts, &answers);
}

Status PsClient::checkpoint(const std::string& /*dir: the shards have their own*/, int step,
                            bool full) {
  const int S = static_cast<int>(shards_.size());
  const char flag = full ? 1 : 0;
  std::vector<std::vector<std::pair<const void*, size_t>>> parts(S, {{&flag, 1}});
  std::vector<std::vector<char>> answers;
  step_ = step;
  return round_trip(PsOp::kCheckpoint, parts, &answers);
}

Status PsClient::finish() {
  const int S = static_cast<int>(shards_.size());
  std::vector<std::vector<std::pair<const void*, size_t>>> parts(S);
  std::vector<std::vector<char>> answers;
  return round_trip(PsOp::kFinish, parts, &answers);
}

}  // namespace cann::recsys
