// Compressed all-reduce with error feedback, on top of any Group: what 1-bit Adam and top-k
// sparsification put on the wire instead of fp32 gradients or momenta.
//
// Both keep the compression error and add it back before compressing the next call's input
// (error feedback, Seide et al. 2014; Karimireddy et al. 2019), so what is dropped in one step
// is sent in a later one and the applied update tracks the true sum over many steps.
// Both compute the average over ranks (not the sum). Their error buffers are state that a
// checkpoint must save (worker_error / server_error).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/group.h"

namespace cann::comm {

// 1-bit all-reduce, the two-phase scheme of 1-bit Adam (Tang et al. 2021, Algorithm 1):
//   worker: c = x + e_w; split c into P chunks; send chunk j as (scale, signs) to rank j
//           (all-to-all); e_w = c - decompress(compress(c)).
//   server (rank j, chunk j): a = mean over ranks of the decompressed chunk j; c' = a + e_s;
//           send (scale, signs) of c' to everyone (all-gather); e_s = c' - decompress(...).
//   result: the concatenation of the decompressed server chunks.
// compress(v) = (||v||_2 / sqrt(len), sign(v)) with sign(0) = +1: one bit per element plus one
// fp32 scale per chunk. Cost: two rounds; each rank sends 2 (P-1)/P (n/32 + P) words against
// a ring fp32 all-reduce's 2 (P-1)/P n words, about 32x fewer bytes.
class OneBitAllreduce {
 public:
  OneBitAllreduce(Group& group, size_t count);

  // data (count) in place becomes the compressed average over ranks.
  Status run(float* data, const Options& opts = {});

  // Payload bytes this rank sent in the last run() (both phases).
  uint64_t last_bytes_sent() const { return last_bytes_sent_; }
  std::vector<float>& worker_error() { return worker_error_; }
  std::vector<float>& server_error() { return server_error_; }
  size_t chunk() const { return chunk_; }

 private:
  Group& group_;
  size_t count_;
  size_t chunk_;  // elements per rank's chunk, ceil(count / P)
  size_t words_;  // 32-bit words per packed chunk: 1 scale + ceil(chunk / 32) sign words
  std::vector<float> worker_error_;  // count
  std::vector<float> server_error_;  // chunk
  std::vector<uint32_t> send_, recv_, gathered_;
  std::vector<float> scratch_;  // the server chunk's average
  uint64_t last_bytes_sent_ = 0;
};

// Error feedback across a change of world size (an elastic generation or a resume on another
// number of ranks), keeping what is held back. What enters the next average is the ranks' mean
// worker error plus the server errors at their chunks' offsets (the identity in
// tests/comm_compressed_test.cc), so every new rank takes the old ranks' mean worker error, and
// new rank `rank` of `world` the old server errors its new chunk covers.
//   worker_all: old_world x count floats, rank after rank; server_all: old_world x
//   ceil(count / old_world). Out: worker, count floats; server, ceil(count / world).
void reshard_onebit_errors(size_t count, int old_world, const float* worker_all,
                           const float* server_all, int world, int rank, float* worker,
                           float* server);
// The mean of `ranks` vectors of `count` floats stored rank after rank (top-k's error, which
// enters the average the same way as 1-bit's worker error).
void mean_over_ranks(size_t count, int ranks, const float* all, float* out);

// Top-k all-reduce: c = x + e; keep the k = max(1, ratio * n) entries of largest magnitude;
// e = c - kept; every rank's (index, value) pairs are all-gathered and summed into the dense
// average. Cost: one all-gather of k pairs per rank: (P-1) * 8k bytes sent by each rank in a
// ring, against 2 (P-1)/P * 4n for fp32.
class TopKAllreduce {
 public:
  TopKAllreduce(Group& group, size_t count, double ratio);

  Status run(float* data, const Options& opts = {});
  // Changes k for the following runs (the error feedback carries over); the buffers follow k,
  // so a denser phase does not keep its memory once it ends.
  void set_ratio(double ratio);

  uint64_t last_bytes_sent() const { return last_bytes_sent_; }
  std::vector<float>& error() { return error_; }
  size_t k() const { return k_; }

 private:
  Group& group_;
  size_t count_;
  size_t k_ = 0;
  std::vector<float> error_;
  std::vector<int32_t> send_, gathered_;  // per rank: k indices then k values (fp32 bits)
  std::vector<uint32_t> order_;           // the entries of the bin that holds the k-th largest
  std::vector<size_t> hist_;              // the magnitudes' histogram, reused
  uint64_t last_bytes_sent_ = 0;
};

}  // namespace cann::comm
