// Two "nodes" for multi-node tests: network namespaces joined by a veth pair (10.231.0.1 and
// 10.231.0.2), redis-server (with a password, since it refuses remote clients in protected mode
// otherwise) in the first as the rendezvous store. Tests skip without root, iproute2 or
// redis-server. A suite derives its own fixture: `class MultiProcX : public test::NetnsNodes {};`.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "test_util.h"

namespace cann::test {

class NetnsNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 missing";
    if (std::system("command -v redis-server >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "redis-server missing";
    suffix_ = std::to_string(getpid() % 100000);
    ns1_ = "cann1-" + suffix_;
    ns2_ = "cann2-" + suffix_;
    const std::string v1 = "cv1-" + suffix_, v2 = "cv2-" + suffix_;
    const std::string script =
        "set -e; ip netns add " + ns1_ + "; ip netns add " + ns2_ + "; ip link add " + v1 +
        " type veth peer name " + v2 + "; ip link set " + v1 + " netns " + ns1_ + "; ip link set " +
        v2 + " netns " + ns2_ + "; ip -n " + ns1_ + " addr add 10.231.0.1/24 dev " + v1 +
        "; ip -n " + ns2_ + " addr add 10.231.0.2/24 dev " + v2 + "; ip -n " + ns1_ + " link set " +
        v1 + " up; ip -n " + ns2_ + " link set " + v2 + " up; ip -n " + ns1_ +
        " link set lo up; ip -n " + ns2_ + " link set lo up";
    ASSERT_EQ(std::system(("(" + script + ") 2>&1").c_str()), 0) << "netns setup failed";
    ready_ = true;
  }
  void TearDown() override {
    if (!ready_) return;
    std::system(("ip netns pids " + ns1_ + " | xargs -r kill -9 2>/dev/null; ip netns pids " +
                 ns2_ + " | xargs -r kill -9 2>/dev/null; ip netns del " + ns1_ +
                 " 2>/dev/null; ip netns del " + ns2_ + " 2>/dev/null")
                    .c_str());
  }
  // redis-server in the first namespace (for at most `seconds`); the rendezvous URL. The test
  // kills it with the namespace's processes, then collects it with redis_.get().
  std::string start_redis(double seconds) {
    password_ = "cann-" + suffix_;
    redis_ = std::async(std::launch::async, [this, seconds] {
      return run_command(
          {"/usr/sbin/ip", "netns", "exec", ns1_, "redis-server", "--port", "6379", "--bind",
           "10.231.0.1", "--requirepass", password_, "--save", "", "--appendonly", "no"},
          seconds);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return "redis://:" + password_ + "@10.231.0.1:6379";
  }
  std::string suffix_, ns1_, ns2_, password_;
  std::future<CommandResult> redis_;
  bool ready_ = false;
};

}  // namespace cann::test
