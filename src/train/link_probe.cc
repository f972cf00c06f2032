// Pairwise link bandwidth probe (see link_probe.h).
#include "train/link_probe.h"

#include <algorithm>

#include "comm/group.h"
#include "core/timer.h"

namespace cann::train {

StatusOr<std::vector<double>> probe_links(comm::Group& group, size_t bytes) {
  const int P = group.size(), r = group.rank();
  std::vector<double> gbps(P, 0.0);
  if (P < 2) return gbps;
  const size_t count = bytes / sizeof(float);
  std::vector<float> out(count, 1.0f), in(count, 0.0f);
  // The calls keep the group's own deadline (--comm-timeout); the waits only outlast it.
  const auto timeout = std::chrono::hours(24);
  comm::Options opts;
  opts.tag = "link_probe";
  constexpr uint32_t kTagBase = 0x4c4e0000;  // "LN" + round and repeat
  for (int s = 1; s < P; ++s) {
    const int dst = (r + s) % P, src = (r - s + P) % P;
    for (int rep = 0; rep < kLinkProbeRepeats; ++rep) {
      CANN_RETURN_IF_ERROR(group.barrier(opts)->wait(timeout));
      const uint32_t tag = kTagBase + static_cast<uint32_t>(s * kLinkProbeRepeats + rep);
      const double t0 = now_seconds();
      auto recv = group.recv(in.data(), count, comm::DataType::kFloat32, src, tag, opts);
      auto send = group.send(out.data(), count, comm::DataType::kFloat32, dst, tag, opts);
      CANN_RETURN_IF_ERROR(recv->wait(timeout));
      const double dt = now_seconds() - t0;
      CANN_RETURN_IF_ERROR(send->wait(timeout));
      if (dt > 0) gbps[src] = std::max(gbps[src], static_cast<double>(count * 4) / dt / 1e9);
    }
  }
  return gbps;
}

}  // namespace cann::train
