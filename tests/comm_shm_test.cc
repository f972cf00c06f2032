// Tests of the shm backend beyond the collective conformance suite (comm_conformance_test.cc):
// the reduction kernel, point-to-point ordering and flow control, sub-groups, error reporting,
// bf16 accuracy, and real processes: four forked ranks over a file store, and a rank killed
// with SIGKILL in the middle of a loop of collectives.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "collective_checks.h"
#include "comm/backends.h"
#include "comm/shm_reduce.h"
#include "comm/shm_segment.h"
#include "comm_test_util.h"
#include "test_util.h"

namespace cann::comm {
namespace {

using namespace conformance;  // Bytes, pattern, check_collectives (collective_checks.h)

TEST(ShmReduceKernel, MatchesReferenceInPlaceAndOutOfPlace) {
  Rng rng(7);
  for (DataType t : kTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (size_t k : {1, 2, 3, 8}) {
        for (size_t n : {0, 1, 1023, 1025, 5001}) {
          std::vector<Bytes> inputs(k, Bytes(n * dtype_size(t)));
          for (auto& in : inputs)
            for (size_t i = 0; i < n; ++i) put(t, in.data(), i, std::round(rng.normal() * 1e3) / 8);
          const Bytes want = reference(inputs, n, t, op);
          std::vector<const std::byte*> srcs;
          for (const auto& in : inputs) srcs.push_back(in.data());
          Bytes out(n * dtype_size(t));
          shm::reduce_buffers(out.data(), srcs, n, t, op);
          const std::string what = std::string(dtype_name(t)) + " " +
                                   std::string(reduce_op_name(op)) + " k=" + std::to_string(k) +
                                   " n=" + std::to_string(n);
          EXPECT_EQ("", compare(out, want, t, what));
          shm::reduce_buffers(inputs[k - 1].data(), srcs, n, t, op);  // dst is a source
          EXPECT_EQ("", compare(inputs[k - 1], want, t, what + " in place"));
        }
      }
    }
  }
}

// bf16 is accumulated in fp32 and rounded once: the result is exactly the rounded fp32 sum in
// rank order, and within half a bf16 ulp (2^-8 relative) of the exact sum, where rounding after
// every addition could be off by up to 7 half-ulps on 8 ranks.
TEST(ShmBf16, AllreduceRoundsOnceFromFp32) {
  constexpr int kWorld = 8;
  constexpr size_t kCount = 100003;
  std::vector<std::vector<uint16_t>> inputs(kWorld, std::vector<uint16_t>(kCount));
  Rng rng(11);
  for (auto& in : inputs)
    for (auto& x : in) x = float_to_bf16(rng.normal());
  std::vector<double> worst(kWorld, 0);
  test::run_group("shm", kWorld, [&](int r, Group& g) {
    std::vector<uint16_t> data = inputs[static_cast<size_t>(r)];
    ASSERT_TRUE(g.allreduce(data.data(), kCount, DataType::kBFloat16, ReduceOp::kSum)->wait().ok());
    for (size_t i = 0; i < kCount; ++i) {
      float sum = 0;
      double exact = 0;
      for (const auto& in : inputs) {
        sum += bf16_to_float(in[i]);
        exact += bf16_to_float(in[i]);
      }
      ASSERT_EQ(data[i], float_to_bf16(sum)) << "element " << i;
      const double err = std::abs(bf16_to_float(data[i]) - exact);
      worst[static_cast<size_t>(r)] =
          std::max(worst[static_cast<size_t>(r)], err / std::max(std::abs(exact), 1e-3));
      ASSERT_LE(err, std::ldexp(std::abs(exact), -8) + 1e-5) << "element " << i;
    }
  });
  std::printf("bf16 allreduce of %d ranks: max relative error %.3g (half ulp 3.9e-3)\n", kWorld,
              worst[0]);
}

// One block far larger than all others: the chunk count comes from the largest block anywhere
// in the matrix, which only rank 0 (sender) and rank 1 (receiver) know before the call.
TEST(ShmCollectivesSkewed, AlltoallvWithOneLargeBlock) {
  constexpr size_t kLarge = 300001;
  test::run_group("shm", 4, [&](int r, Group& g) {
    auto n = [](int s, int d) { return s == 0 && d == 1 ? kLarge : size_t{1}; };
    std::vector<size_t> in_counts, out_counts;
    std::vector<Bytes> sent, received;
    for (int q = 0; q < 4; ++q) {
      in_counts.push_back(n(r, q));
      out_counts.push_back(n(q, r));
      sent.push_back(pattern(DataType::kFloat32, n(r, q), r, q));
      received.push_back(pattern(DataType::kFloat32, n(q, r), q, r));
    }
    const Bytes in = concat(sent);
    Bytes out(concat(received).size());
    ASSERT_TRUE(
        g.alltoallv(out.data(), out_counts, in.data(), in_counts, DataType::kFloat32)->wait().ok());
    EXPECT_EQ("", compare(out, concat(received), DataType::kFloat32, "skewed alltoallv"));
    EXPECT_EQ("", check_collectives(g, DataType::kInt32, 7));  // still in step afterwards
  });
}

// Receives posted in the opposite order of the sends: the first message is stashed. A message
// to oneself goes through the (r, r) ring.
TEST(ShmPointToPoint, TagsMatchInAnyOrderAndSelfSendWorks) {
  test::run_group("shm", 2, [&](int r, Group& g) {
    const int peer = 1 - r;
    const Bytes a = pattern(DataType::kInt32, 1000, r, 1), b = pattern(DataType::kInt32, 3, r, 2);
    auto s1 = g.send(a.data(), 1000, DataType::kInt32, peer, 1);
    auto s2 = g.send(b.data(), 3, DataType::kInt32, peer, 2);
    auto self = g.send(b.data(), 3, DataType::kInt32, r, 9);
    Bytes got_b(3 * 4), got_a(1000 * 4), got_self(3 * 4);
    ASSERT_TRUE(g.recv(got_b.data(), 3, DataType::kInt32, peer, 2)->wait().ok());
    ASSERT_TRUE(g.recv(got_a.data(), 1000, DataType::kInt32, peer, 1)->wait().ok());
    ASSERT_TRUE(g.recv(got_self.data(), 3, DataType::kInt32, r, 9)->wait().ok());
    EXPECT_EQ("", compare(got_a, pattern(DataType::kInt32, 1000, peer, 1), DataType::kInt32, "a"));
    EXPECT_EQ("", compare(got_b, pattern(DataType::kInt32, 3, peer, 2), DataType::kInt32, "b"));
    EXPECT_EQ("", compare(got_self, b, DataType::kInt32, "self"));
    for (auto& w : {s1, s2, self}) EXPECT_TRUE(w->wait().ok());
  });
}

// 24 MiB each way at once through 256 KiB rings, while the receiver's collective lane is
// blocked in a barrier that the sender joins only after its send completed: a send must need
// nothing but the receiver's receive lane.
TEST(ShmPointToPoint, LargeMessagesFlowWhileTheCollectiveLaneIsBusy) {
  constexpr size_t kCount = 6 << 20;
  test::run_group("shm", 2, [&](int r, Group& g) {
    const int peer = 1 - r;
    const Bytes out = pattern(DataType::kFloat32, kCount, r, 3);
    Bytes in(kCount * 4);
    std::shared_ptr<Work> barrier;
    if (r == 1) barrier = g.barrier();
    auto send = g.send(out.data(), kCount, DataType::kFloat32, peer, 5);
    auto recv = g.recv(in.data(), kCount, DataType::kFloat32, peer, 5);
    ASSERT_TRUE(send->wait().ok());
    ASSERT_TRUE(recv->wait().ok());
    if (r == 0) barrier = g.barrier();
    ASSERT_TRUE(barrier->wait().ok());
    EXPECT_EQ("",
              compare(in, pattern(DataType::kFloat32, kCount, peer, 3), DataType::kFloat32, "p2p"));
    EXPECT_EQ(g.stats().bytes_sent, kCount * 4);
  });
}

TEST(ShmSubgroups, MembersReduceAmongThemselvesAndOthersGetNull) {
  test::run_group("shm", 6, [&](int r, Group& g) {
    const std::vector<int> evens = {0, 2, 4}, odds = {1, 3, 5};
    auto even = g.new_subgroup(evens, "even");
    auto odd = g.new_subgroup(odds, "odd");
    ASSERT_TRUE(even.ok() && odd.ok());
    EXPECT_EQ(*even == nullptr, r % 2 == 1);
    EXPECT_EQ(*odd == nullptr, r % 2 == 0);
    Group& sub = r % 2 == 0 ? **even : **odd;
    EXPECT_EQ(sub.rank(), r / 2);
    EXPECT_EQ(sub.size(), 3);
    int64_t x = r;
    ASSERT_TRUE(sub.allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum)->wait().ok());
    EXPECT_EQ(x, r % 2 == 0 ? 0 + 2 + 4 : 1 + 3 + 5);
    EXPECT_EQ("", check_collectives(sub, DataType::kFloat32, 7));
    EXPECT_FALSE(g.new_subgroup({2, 1}, "unsorted").ok());
    EXPECT_FALSE(g.new_subgroup({0, 6}, "outside").ok());
  });
}

TEST(ShmErrors, DebugChecksNameTheMismatchedCollective) {
  test::run_group(
      "shm", 3,
      [&](int r, Group& g) {
        float data[8] = {};
        const Status s =
            g.allreduce(data, r == 2 ? 8 : 7, DataType::kFloat32, ReduceOp::kSum)->wait();
        EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
        EXPECT_NE(s.message().find("collective mismatch"), std::string::npos) << s.message();
        EXPECT_NE(s.message().find("of 8 fp32"), std::string::npos) << s.message();
        EXPECT_FALSE(g.barrier()->wait().ok());  // the group stays broken
      },
      [](GroupConfig& c) { c.debug_checks = true; });
}

TEST(ShmErrors, RanksOnDifferentHostsAreRefused) {
  auto store = test::fresh_memory_store();
  test::run_ranks(4, [&](int r) {
    GroupConfig c;
    c.backend = "shm";
    c.store = store;
    c.prefix = "hosts";
    c.rank = r;
    c.size = 4;
    c.host_id = r == 3 ? "node-b" : "node-a";
    auto g = create_group(c);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find(
                  "shm backend needs all ranks on one host; rank 3 is on host node-b"),
              std::string::npos)
        << g.status().message();
  });
}

TEST(ShmErrors, TimeoutNamesTheRanksThatDidNotArrive) {
  test::run_group("shm", 3, [&](int r, Group& g) {
    if (r == 2) {  // never joins, but keeps its group alive until the others have given up
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    Options opts;
    opts.timeout = std::chrono::milliseconds(300);
    opts.tag = "grads";
    float x = 1;
    const Status s = g.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, opts)->wait();
    EXPECT_NE(s.message().find("shm allreduce #1 [grads]"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("timed out after 300 ms waiting for rank 2 (pid"), std::string::npos)
        << s.message();
  });
}

TEST(ShmErrors, APeerThatDestroyedItsGroupIsNamedAtOnce) {
  test::run_group("shm", 2, [&](int r, Group& g) {
    if (r == 1) return;  // run_group destroys rank 1's group right away
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Options opts;
    opts.timeout = std::chrono::seconds(30);
    float x = 1;
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = g.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, opts)->wait();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_NE(s.message().find("rank 1 (pid " + std::to_string(getpid()) + ") destroyed its group"),
              std::string::npos)
        << s.message();
  });
}

TEST(ShmErrors, AlltoallvCountsThatDisagreeAreReportedOnEveryRank) {
  test::run_group("shm", 2, [&](int r, Group& g) {
    const std::vector<size_t> in_counts = {1, r == 0 ? size_t{5} : size_t{1}};
    const std::vector<size_t> out_counts = {1, 1};
    std::vector<float> in(6), out(2);
    const Status s =
        g.alltoallv(out.data(), out_counts, in.data(), in_counts, DataType::kFloat32)->wait();
    EXPECT_NE(s.message().find("rank 0 sends 5 elements to rank 1, which expects 1"),
              std::string::npos)
        << s.message();
  });
}

TEST(ShmStats, AllreduceCountsTwiceTheShareOfPeers) {
  test::run_group("shm", 4, [&](int, Group& g) {
    std::vector<float> x(1000, 1.0f);
    ASSERT_TRUE(g.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kAvg)->wait().ok());
    EXPECT_EQ(x[999], 1.0f);
    EXPECT_EQ(g.stats().bytes_sent, 2u * 3 * 4000 / 4);  // 2 (P-1)/P of the buffer
    EXPECT_EQ(g.stats().ops, 1u);
  });
}

// Real processes: `world` forked ranks over a file store in `dir`. Each runs body(rank, group)
// and exits 0 when it returns "" (1 otherwise, 2 when the group could not be built); what it
// returned is left in <dir>/rank<r>.txt.
std::vector<pid_t> fork_ranks(int world, const test::TempDir& dir, const std::string& prefix,
                              const std::function<std::string(int, Group&)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid != 0) {
      pids.push_back(pid);
      continue;
    }
    int code = 2;
    std::string message;
    {
      auto store = open_store("file://" + dir.file("store"));
      GroupConfig c;
      c.backend = "shm";
      c.store = store.ok() ? *store : nullptr;
      c.prefix = prefix;
      c.rank = r;
      c.size = world;
      c.timeout = std::chrono::seconds(30);
      auto g = create_group(c);
      if (g.ok()) {
        message = body(r, **g);
        code = message.empty() ? 0 : 1;
      } else {
        message = g.status().message();
      }
    }
    test::write_text(dir.file("rank" + std::to_string(r) + ".txt"), message);
    _exit(code);
  }
  return pids;
}

// The child's exit code, or -1 if it is still running after timeout_s (then it is killed).
int wait_exit(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Where the group under `prefix` had its segment; it must be gone once every rank attached.
std::string segment_path(const test::TempDir& dir, const std::string& prefix) {
  auto store = open_store("file://" + dir.file("store"));
  if (!store.ok()) return "";
  auto nonce = (*store)->try_get(prefix + "/shm/nonce");
  if (!nonce.ok() || !nonce->has_value()) return "";
  return "/dev/shm" + shm::segment_name(prefix, std::strtoull((*nonce)->c_str(), nullptr, 10));
}

TEST(MultiProcShm, FourProcessesMatchTheReference) {
  test::TempDir dir("shm-multiproc");
  const auto pids = fork_ranks(4, dir, "job/mp", [](int, Group& g) {
    std::string errors;
    for (DataType t : kTypes) errors += check_collectives(g, t, 7);
    errors += check_collectives(g, DataType::kFloat32, kBig);
    errors += check_collectives(g, DataType::kBFloat16, kBig);
    return errors;
  });
  for (size_t r = 0; r < pids.size(); ++r) {
    EXPECT_EQ(wait_exit(pids[r], 240), 0) << "rank " << r;
    EXPECT_EQ(test::read_text(dir.file("rank" + std::to_string(r) + ".txt")), "");
  }
  const std::string segment = segment_path(dir, "job/mp");
  ASSERT_FALSE(segment.empty());
  EXPECT_FALSE(std::filesystem::exists(segment)) << segment;
}

// SIGKILL one of four ranks in the middle of a loop of allreduces with a 30 s timeout: every
// survivor must fail within a fraction of a second (it sees the dead pid, or a peer that saw
// it), name the dead rank and pid, and leave nothing in /dev/shm.
TEST(MultiProcShm, SigkilledRankIsNamedBySurvivorsWellBeforeTheTimeout) {
  test::TempDir dir("shm-kill");
  const auto pids = fork_ranks(4, dir, "job/kill", [&](int r, Group& g) {
    std::vector<float> grads(1 << 18);
    Options opts;
    opts.timeout = std::chrono::seconds(30);
    for (int step = 0;; ++step) {
      std::fill(grads.begin(), grads.end(), static_cast<float>(r));
      const Status s =
          g.allreduce(grads.data(), grads.size(), DataType::kFloat32, ReduceOp::kSum, opts)->wait();
      if (!s.ok()) return s.message();
      if (grads[12345] != 6.0f) return std::string("wrong sum");
      if (step == 3) test::write_text(dir.file("running" + std::to_string(r)), "");
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < 4; ++r)
    while (!std::filesystem::exists(dir.file("running" + std::to_string(r))) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string segment = segment_path(dir, "job/kill");
  EXPECT_FALSE(segment.empty());
  EXPECT_FALSE(std::filesystem::exists(segment)) << "unlinked once every rank attached";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  ASSERT_EQ(kill(pids[2], SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  const std::string dead = "rank 2 (pid " + std::to_string(pids[2]) + ") died";
  for (int r : {0, 1, 3}) {
    const int code = wait_exit(pids[static_cast<size_t>(r)], 10);
    const double after =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    const std::string message = test::read_text(dir.file("rank" + std::to_string(r) + ".txt"));
    std::printf("rank %d failed %.0f ms after the kill: %s\n", r, after * 1000, message.c_str());
    EXPECT_EQ(code, 1) << "rank " << r;
    EXPECT_LT(after, 2.0) << "rank " << r;
    EXPECT_NE(message.find(dead), std::string::npos) << message;
  }
  EXPECT_EQ(wait_exit(pids[2], 10), 128 + SIGKILL);
  EXPECT_FALSE(std::filesystem::exists(segment));
}

}  // namespace
}  // namespace cann::comm
