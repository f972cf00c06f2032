// Synthetic click logs with planted structure, so a model's AUC can be judged against the best
// achievable one instead of against a guess.
//
// The planted model. User u has a latent factor U_u and a popularity bias b_u; item i has V_i
// and b_i. An impression of (u, i) is a click with probability
//   p = sigmoid(bias + b_u + b_i + signal * <U_u, V_i>).
// Factors are U_u = d^(-1/4) * (sqrt(a) * G_g(u) + sqrt(1 - a) * E_u) with d = latent_dim,
// a = group_share, and G (the factor of u's group) and E (u's own) of independent standard
// normal components, so <U_u, V_i> has variance 1 for any d. b_u ~ N(0, 0.5^2). Items alike.
// Every factor and bias is a function of (seed, id) alone, drawn from an Rng keyed by a hash of
// them: nothing is stored per id, so 10^8 users cost no memory.
//
// An impression at stream position n draws, from an Rng keyed by (seed, n): a user and an item
// by Zipf(zipf_s) popularity over their id spaces (rank k is id k - 1), the label ~ Bernoulli(p),
// the dense noise and the noise ids. Position n is therefore the same impression whoever asks
// and in whatever batch: rank r of R can read positions r*B, (r + R)*B, ... and a resumed job
// continues exactly.
//
// Features of one impression:
// - dense (dense_features): a fixed random projection of [U_u, V_i] (drawn from the seed, about
//   unit variance) plus N(0, dense_noise^2) noise;
// - sparse, user side (user_features bags of one id): the user id, then its group in
//   [0, groups) (a hash of the id, so popular users are spread over groups), then ids uniform in
//   [0, 10000) that carry no signal; item side (item_features) likewise, starting at feature
//   user_features.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "recsys/click_batch.h"

namespace cann::recsys {

// Zipf(s) over ranks 1..n, P(k) proportional to k^-s, by rejection-inversion (Hörmann and
// Derflinger 1996, "Rejection-inversion to generate variates from monotone discrete
// distributions"): O(1) expected time per draw and O(1) memory for any n and any s > 0, s = 1
// included. In double precision the frequencies stay exact (16 million draws match per
// power-of-two band of ranks) up to n = 2^40; beyond, rounding of x + 0.5 and of H near the
// far ranks starts to shift mass between bands, so n is capped there.
inline constexpr uint64_t kZipfMaxN = uint64_t{1} << 40;

class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s);  // 1 <= n <= kZipfMaxN, s > 0
  uint64_t sample(Rng& rng) const;    // in [1, n]
  uint64_t n() const { return n_; }
  double s() const { return s_; }

 private:
  double h(double x) const;           // x^-s
  double h_integral(double x) const;  // an antiderivative of h, continuous in s
  double h_integral_inverse(double x) const;

  uint64_t n_;
  double s_;
  double h_integral_x1_, h_integral_n_, squeeze_;
};

struct SyntheticClickSpec {
  int64_t users = 100000, items = 50000;     // id spaces, each at most kZipfMaxN
  double zipf_s = 1.05;                      // Zipf exponent of user and item popularity
  int latent_dim = 8;                        // planted factor dimension, 1..256
  int dense_features = 13;                   // noisy projections of the user and item factors
  int user_features = 2, item_features = 2;  // sparse features per side (>= 1: the id first)
  int64_t groups = 1000;                     // ids per side's group feature
  double group_share = 0.5;                  // share of a factor's variance set by its group
  double signal = 2.0;                       // scale of <U, V> in the logit
  double bias = -1.0;                        // logit offset (sets the click rate)
  double dense_noise = 0.5;
  uint64_t seed = 1;
};

// InvalidArgument naming the first bad field, with a hint.
Status validate(const SyntheticClickSpec& spec);

// Thread-safe: fill() is const and keeps no state between calls.
class SyntheticClicks {
 public:
  explicit SyntheticClicks(const SyntheticClickSpec& spec);  // spec must validate()

  // Fills `batch` impressions, stream positions index .. index + batch - 1, with click_prob set
  // to each one's planted p.
  void fill(int64_t index, int batch, ClickBatch* out) const;
  // The planted p of one (user, item) pair.
  double click_probability(int64_t user, int64_t item) const;

  int sparse_features() const { return spec_.user_features + spec_.item_features; }
  int dense_features() const { return spec_.dense_features; }
  int user_features() const { return spec_.user_features; }
  const SyntheticClickSpec& spec() const { return spec_; }

 private:
  // Writes d^(1/4) * U (unit-variance components, what the projection reads) of one user or
  // item (by `salt`) to `factor` and returns its bias; `group` receives the id's group.
  float entity(uint64_t salt, int64_t id, float* factor, int64_t* group) const;
  // The logit of (user, item); uv (2 * latent_dim) receives [d^(1/4) U, d^(1/4) V].
  double planted_logit(int64_t user, int64_t item, float* uv, int64_t* user_group,
                       int64_t* item_group) const;

  SyntheticClickSpec spec_;
  ZipfSampler user_popularity_, item_popularity_;
  std::vector<float> projection_;  // (dense_features, 2 * latent_dim)
};

// The AUC and log loss that scoring each impression by its true p achieves on positions
// first_index .. first_index + rows - 1: the ceiling on that sample, since no model can do
// better in expectation than the probabilities that generated the labels.
double planted_auc(const SyntheticClicks& clicks, int64_t first_index, int64_t rows);
double planted_log_loss(const SyntheticClicks& clicks, int64_t first_index, int64_t rows);

}  // namespace cann::recsys
