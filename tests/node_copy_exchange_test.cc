// The exchange that carries snapshot copies between nodes (train/node_copy_exchange.h), over
// real gloo groups of ranks as threads: each rank sends a frame to the rank one "node" ahead
// and receives the frame of the rank one behind; frames change size from call to call (the
// first call asks for the sizes, later ones travel padded to the capacity both sides know,
// and one that outgrows it sends its rest point to point); every received frame must be the
// sent one, word for word, with its prefix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_test_util.h"
#include "train/node_copy_exchange.h"

namespace cann::train {
namespace {

using namespace std::chrono_literals;

// The payload rank `r` sends in call `call`: `header` header words, then `body` body words,
// every word naming its rank, call and position.
std::vector<int32_t> frame(int r, int call, size_t header, size_t body) {
  std::vector<int32_t> f(NodeCopyExchange::kPrefixWords, 0);
  for (size_t i = 0; i < header + body; ++i)
    f.push_back(static_cast<int32_t>(r * 1000003 + call * 7919 + static_cast<int>(i)));
  return f;
}

// One exchange as the engine runs it: started, then finished.
Status exchange(NodeCopyExchange& x, comm::Group& g, int to, int from, bool sends, bool receives,
                std::vector<int32_t>& out, size_t header, std::vector<int32_t>& in,
                const comm::Options& opts, std::chrono::milliseconds wait) {
  if (Status s = x.start(g, to, from, sends, receives, out, header, in, opts, wait); !s.ok())
    return s;
  return x.finish(wait);
}

struct Call {
  size_t header, body;
};

// `world` ranks, `per_node` to a node; rank r sends to r + per_node (around the ring) when
// sends[r]; the frames of `calls` in order.
void exchange_all(int world, int per_node, const std::vector<bool>& sends,
                  const std::vector<Call>& calls, const std::string& backend = "gloo") {
  auto hosts = [&](comm::GroupConfig& c) {
    c.host_id = "host" + std::to_string(c.rank / per_node);
  };
  test::run_group(
      backend, world,
      [&](int r, comm::Group& g) {
        NodeCopyExchange x;
        const int to = (r + per_node) % world, from = (r - per_node + world) % world;
        std::vector<int32_t> out, in;
        for (size_t c = 0; c < calls.size(); ++c) {
          const int call = static_cast<int>(c);
          out = sends[r] ? frame(r, call, calls[c].header, calls[c].body)
                         : std::vector<int32_t>(NodeCopyExchange::kPrefixWords, 0);
          comm::Options opts;
          opts.timeout = 20s;
          const Status s =
              exchange(x, g, to, from, sends[r], sends[from], out, calls[c].header, in, opts, 30s);
          ASSERT_TRUE(s.ok()) << "rank " << r << " call " << c << ": " << s.message();
          if (!sends[from]) {
            EXPECT_EQ(x.received_words(), 0);
            continue;
          }
          std::vector<int32_t> want = frame(from, call, calls[c].header, calls[c].body);
          ASSERT_EQ(x.received_words(), static_cast<int64_t>(want.size()))
              << "rank " << r << " call " << c;
          EXPECT_EQ(x.received_header_words(), static_cast<int64_t>(calls[c].header));
          ASSERT_EQ(in.size(), want.size());
          EXPECT_TRUE(std::equal(want.begin() + NodeCopyExchange::kPrefixWords, want.end(),
                                 in.begin() + NodeCopyExchange::kPrefixWords))
              << "rank " << r << " call " << c << ": the payload differs";
        }
      },
      hosts);
}

// Sizes asked for, then the same size, smaller (padded), larger within the margin, then far
// larger (the rest point to point), then back to small.
const std::vector<Call> kCalls = {{10, 1000},
                                  {12, 1000},
                                  {3, 500},
                                  {40, 1000 + NodeCopyExchange::kMarginWords / 2},
                                  {5000, 3 * NodeCopyExchange::kMarginWords},
                                  {7, 20}};

TEST(NodeCopyExchange, TwoNodesOfTwoEveryRankSends) {
  exchange_all(4, 2, {true, true, true, true}, kCalls);
}

TEST(NodeCopyExchange, TwoHostsOfTwoOverTheHierarchicalBackend) {
  // The engine's backend across nodes: shm within a host, gloo between; all-to-all and point to
  // point go over its flat gloo group.
  exchange_all(4, 2, {true, true, true, true}, kCalls, "hierarchical");
}

TEST(NodeCopyExchange, OnlySomeRanksSend) {
  // Three nodes of two: the copies of ranks 0 and 3 only (their parts live on one node).
  exchange_all(6, 2, {true, false, false, true, false, false}, kCalls);
}

TEST(NodeCopyExchange, RingOfSingleRankNodes) {
  exchange_all(3, 1, {true, true, true}, kCalls);
  exchange_all(2, 1, {true, true}, kCalls);
}

TEST(NodeCopyExchange, ResetAsksForTheSizesAgain) {
  // A new plan on every rank between calls (a changed layout): the sizes are exchanged afresh
  // and a much larger frame needs no point-to-point rest.
  test::run_group("gloo", 2, [&](int r, comm::Group& g) {
    NodeCopyExchange x;
    std::vector<int32_t> out, in;
    comm::Options opts;
    opts.timeout = 20s;
    for (int call = 0; call < 3; ++call) {
      const size_t body = call == 2 ? 50000 : 100;
      out = frame(r, call, 4, body);
      if (call == 2) x.reset();
      ASSERT_TRUE(exchange(x, g, 1 - r, 1 - r, true, true, out, 4, in, opts, 30s).ok());
      ASSERT_EQ(in.size(), NodeCopyExchange::kPrefixWords + 4 + body);
      EXPECT_EQ(in.back(), frame(1 - r, call, 4, body).back());
    }
  });
}

TEST(NodeCopyExchange, AFrameWithoutItsHeaderIsRefusedBeforeAnyCollective) {
  test::run_group("gloo", 1, [&](int, comm::Group& g) {
    NodeCopyExchange x;
    std::vector<int32_t> out(NodeCopyExchange::kPrefixWords + 2, 0), in;
    const Status s = exchange(x, g, 0, 0, true, true, out, 5, in, {}, 1s);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cannot hold its 5-word header"), std::string::npos) << s.message();
  });
}

}  // namespace
}  // namespace cann::train
