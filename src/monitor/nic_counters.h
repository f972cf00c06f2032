// Error counters of this host's network interfaces, read where the kernel exposes them:
//
//   /sys/class/net/<dev>/statistics/{rx,tx}_{errors,dropped}            every interface (lo too)
//   /sys/class/infiniband/<dev>/ports/<port>/counters/<name>            RDMA adapters, when present
//     (symbol_error, port_rcv_errors, link_downed, link_error_recovery, port_xmit_discards,
//      port_rcv_remote_physical_errors, local_link_integrity_errors,
//      excessive_buffer_overrun_errors)
//
// A counter that is absent or unreadable is skipped without a word: a host without InfiniBand
// simply reports its Ethernet counters. Each rank reads its host's counters (at most once a
// second, from the step reporter) and sends them in its snapshot; the hub exposes them once per
// host as cann_train_nic_errors_total{host, device, counter}, where the alert rules watch them
// grow. An InfiniBand port is named "<dev>/<port>" ("mlx5_0/1").
//
// Thread safety: a free function over the file system; no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cann::monitor {

struct NicCounter {
  std::string device;   // "eth0", "lo", "mlx5_0/1"
  std::string counter;  // "rx_errors", "symbol_error", ...
  int64_t value = 0;
};

// `sys_root` is "/sys" but for tests, which build a tree of their own.
std::vector<NicCounter> read_nic_counters(const std::string& sys_root = "/sys");

}  // namespace cann::monitor
