// The synthetic click generator and its Zipf sampler. Everything random is drawn from an Rng
// keyed by a hash of (seed, salt, number), with one salt per kind of draw, so an impression, a
// factor or a group never depends on what was drawn before it.
#include "recsys/synthetic_clicks.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "recsys/metrics.h"

namespace cann::recsys {
namespace {

constexpr int kMaxLatentDim = 256;
constexpr int64_t kNoiseIds = 10000;

// Each side takes three salts: base (an id's own factor and bias), base + 1 (an id's group),
// base + 2 (a group's factor).
constexpr uint64_t kUserSalt = 0x7573657200000000ULL;
constexpr uint64_t kItemSalt = 0x6974656d00000000ULL;
constexpr uint64_t kStreamSalt = 0x73747265616d0000ULL;
constexpr uint64_t kProjectionSalt = 0x70726f6a00000000ULL;

// splitmix64's finalizer (Steele, Lea, Flood 2014): a bijection on 64 bits whose outputs for
// consecutive inputs look independent.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t key(uint64_t seed, uint64_t salt, uint64_t n) {
  return mix(mix(seed ^ salt) + n * 0x9e3779b97f4a7c15ULL);
}

// Uniform in [0, 1) with 53 bits: Rng::uniform's 24 bits would leave most of 10^8 Zipf ranks
// unreachable, since the inversion maps equal steps in u to ever wider steps in rank.
double uniform53(Rng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0);
}

// log(1 + x) / x and (exp(x) - 1) / x, with their series near 0 where the quotient loses
// precision; they make the Zipf integral continuous through s = 1.
double log1p_over_x(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}
double expm1_over_x(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

double sigmoid(double z) {
  return 1 / (1 + std::exp(-z));
}

Status bad_spec(const std::string& what, const std::string& hint) {
  return InvalidArgument("synthetic clicks: " + what + "; hint: " + hint);
}

}  // namespace

// Rejection-inversion, as in Apache Commons RNG's RejectionInversionZipfSampler. With h(x) =
// x^-s and H an antiderivative, draw u uniform in (H(1.5) - 1, H(n + 0.5)], invert x = H^-1(u)
// and round to k. The area under h over [k - 0.5, k + 0.5] stands for P(k); k is accepted when
// u falls in the part of it of height h(k), which is exact because h is convex. The squeeze
// accepts most draws (|k - x| small) without evaluating H again.
ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
  CANN_CHECK(n >= 1 && n <= kZipfMaxN && s > 0) << "n " << n << " s " << s;
  h_integral_x1_ = h_integral(1.5) - 1;
  h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
  squeeze_ = 2 - h_integral_inverse(h_integral(2.5) - h(2));
}

double ZipfSampler::h(double x) const {
  return std::exp(-s_ * std::log(x));
}

// (x^(1-s) - 1) / (1 - s), which tends to log(x) as s -> 1.
double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return expm1_over_x((1 - s_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding can push t just past the domain's edge
  return std::exp(log1p_over_x(t) * x);
}

uint64_t ZipfSampler::sample(Rng& rng) const {
  while (true) {
    const double u = h_integral_n_ + uniform53(rng) * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    double rounded = std::floor(x + 0.5);
    if (rounded < 1) rounded = 1;
    if (rounded > static_cast<double>(n_)) rounded = static_cast<double>(n_);
    const uint64_t k = static_cast<uint64_t>(rounded);
    if (rounded - x <= squeeze_ || u >= h_integral(rounded + 0.5) - h(rounded)) return k;
  }
}

Status validate(const SyntheticClickSpec& spec) {
  if (spec.users < 1 || spec.users > int64_t{kZipfMaxN}) {
    return bad_spec("users is " + std::to_string(spec.users) + " (expected 1 .. 2^40)",
                    "set users to the size of the user id space");
  }
  if (spec.items < 1 || spec.items > int64_t{kZipfMaxN}) {
    return bad_spec("items is " + std::to_string(spec.items) + " (expected 1 .. 2^40)",
                    "set items to the size of the item id space");
  }
  if (!(spec.zipf_s > 0) || !std::isfinite(spec.zipf_s)) {
    return bad_spec("zipf_s is " + std::to_string(spec.zipf_s) + " (expected > 0)",
                    "1.05 is typical of click logs; values near 0 make popularity uniform");
  }
  if (spec.latent_dim < 1 || spec.latent_dim > kMaxLatentDim) {
    return bad_spec("latent_dim is " + std::to_string(spec.latent_dim) + " (expected 1 .. " +
                        std::to_string(kMaxLatentDim) + ")",
                    "8 to 64 is typical");
  }
  if (spec.dense_features < 0) {
    return bad_spec("dense_features is " + std::to_string(spec.dense_features),
                    "use 0 for none, 13 as in Criteo");
  }
  if (spec.user_features < 1 || spec.item_features < 1) {
    return bad_spec("user_features " + std::to_string(spec.user_features) + ", item_features " +
                        std::to_string(spec.item_features) + " (each side needs at least 1)",
                    "the first feature of each side is its id; 2 adds the group");
  }
  if (spec.groups < 1 || spec.groups > int64_t{kZipfMaxN}) {
    return bad_spec("groups is " + std::to_string(spec.groups) + " (expected 1 .. 2^40)",
                    "1000 groups is the default");
  }
  if (!(spec.group_share >= 0 && spec.group_share <= 1)) {
    return bad_spec("group_share is " + std::to_string(spec.group_share) + " (expected 0 .. 1)",
                    "0 makes groups carry no signal, 1 makes every member of a group alike");
  }
  if (!std::isfinite(spec.signal) || !std::isfinite(spec.bias) ||
      !(spec.dense_noise >= 0 && std::isfinite(spec.dense_noise))) {
    return bad_spec("signal, bias and dense_noise must be finite, dense_noise >= 0",
                    "the defaults are signal 2, bias -1, dense_noise 0.5");
  }
  return OkStatus();
}

namespace {

// Checked before any member is built from it, so a bad spec fails with validate()'s message.
const SyntheticClickSpec& checked(const SyntheticClickSpec& spec) {
  Status status = validate(spec);
  CANN_CHECK(status.ok()) << status.message();
  return spec;
}

}  // namespace

SyntheticClicks::SyntheticClicks(const SyntheticClickSpec& spec)
    : spec_(checked(spec)),
      user_popularity_(static_cast<uint64_t>(spec.users), spec.zipf_s),
      item_popularity_(static_cast<uint64_t>(spec.items), spec.zipf_s) {
  // Entries of variance 1 / (2d) over the 2d unit-variance factor components give each dense
  // feature variance 1 before the noise.
  const int inputs = 2 * spec.latent_dim;
  projection_.resize(static_cast<size_t>(spec.dense_features) * inputs);
  Rng rng(key(spec.seed, kProjectionSalt, 0));
  const double scale = 1 / std::sqrt(static_cast<double>(inputs));
  for (auto& w : projection_) w = static_cast<float>(rng.normal() * scale);
}

float SyntheticClicks::entity(uint64_t salt, int64_t id, float* factor, int64_t* group) const {
  const int d = spec_.latent_dim;
  const auto n = static_cast<uint64_t>(id);
  *group = static_cast<int64_t>(key(spec_.seed, salt + 1, n) % static_cast<uint64_t>(spec_.groups));
  const double own = std::sqrt(1 - spec_.group_share), shared = std::sqrt(spec_.group_share);
  Rng group_rng(key(spec_.seed, salt + 2, static_cast<uint64_t>(*group)));
  for (int k = 0; k < d; ++k) factor[k] = static_cast<float>(shared * group_rng.normal());
  Rng own_rng(key(spec_.seed, salt, n));
  for (int k = 0; k < d; ++k) factor[k] += static_cast<float>(own * own_rng.normal());
  return static_cast<float>(0.5 * own_rng.normal());
}

// uv holds unit-variance components, so <U, V> = <u, v> / sqrt(d).
double SyntheticClicks::planted_logit(int64_t user, int64_t item, float* uv, int64_t* user_group,
                                      int64_t* item_group) const {
  const int d = spec_.latent_dim;
  const float user_bias = entity(kUserSalt, user, uv, user_group);
  const float item_bias = entity(kItemSalt, item, uv + d, item_group);
  double dot = 0;
  for (int k = 0; k < d; ++k) dot += static_cast<double>(uv[k]) * uv[d + k];
  return spec_.bias + user_bias + item_bias + spec_.signal * dot / std::sqrt(d);
}

double SyntheticClicks::click_probability(int64_t user, int64_t item) const {
  std::vector<float> uv(2 * spec_.latent_dim);
  int64_t user_group = 0, item_group = 0;
  return sigmoid(planted_logit(user, item, uv.data(), &user_group, &item_group));
}

void SyntheticClicks::fill(int64_t index, int batch, ClickBatch* out) const {
  CANN_CHECK(index >= 0 && batch >= 0) << "index " << index << " batch " << batch;
  const int d = spec_.latent_dim, dense_count = spec_.dense_features;
  const int uf = spec_.user_features, features = sparse_features();
  out->resize_one_id_per_bag(batch, dense_count, features, true);
  std::vector<float> uv(2 * d);
  for (int b = 0; b < batch; ++b) {
    Rng rng(key(spec_.seed, kStreamSalt, static_cast<uint64_t>(index + b)));
    const auto user = static_cast<int64_t>(user_popularity_.sample(rng) - 1);
    const auto item = static_cast<int64_t>(item_popularity_.sample(rng) - 1);
    int64_t user_group = 0, item_group = 0;
    const double p = sigmoid(planted_logit(user, item, uv.data(), &user_group, &item_group));
    out->click_prob[b] = static_cast<float>(p);
    out->labels[b] = uniform53(rng) < p ? 1.0f : 0.0f;

    float* dense = out->dense.data() + static_cast<int64_t>(b) * dense_count;
    for (int j = 0; j < dense_count; ++j) {
      const float* w = projection_.data() + static_cast<int64_t>(j) * 2 * d;
      double x = 0;
      for (int k = 0; k < 2 * d; ++k) x += static_cast<double>(w[k]) * uv[k];
      dense[j] = static_cast<float>(x + spec_.dense_noise * rng.normal());
    }

    // Bag (b, f) of one id sits at ids[f * batch + b].
    auto put = [&](int f, int64_t id) { out->ids[static_cast<int64_t>(f) * batch + b] = id; };
    put(0, user);
    if (uf > 1) put(1, user_group);
    for (int f = 2; f < uf; ++f) put(f, static_cast<int64_t>(rng.below(kNoiseIds)));
    put(uf, item);
    if (features - uf > 1) put(uf + 1, item_group);
    for (int f = uf + 2; f < features; ++f) put(f, static_cast<int64_t>(rng.below(kNoiseIds)));
  }
}

namespace {

// Probabilities and labels of positions first .. first + rows - 1, generated in chunks.
void planted_sample(const SyntheticClicks& clicks, int64_t first, int64_t rows,
                    std::vector<float>* probs, std::vector<float>* labels) {
  constexpr int kChunk = 4096;
  probs->clear();
  labels->clear();
  ClickBatch batch;
  for (int64_t done = 0; done < rows;) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, rows - done));
    clicks.fill(first + done, n, &batch);
    probs->insert(probs->end(), batch.click_prob.begin(), batch.click_prob.end());
    labels->insert(labels->end(), batch.labels.begin(), batch.labels.end());
    done += n;
  }
}

}  // namespace

double planted_auc(const SyntheticClicks& clicks, int64_t first_index, int64_t rows) {
  std::vector<float> probs, labels;
  planted_sample(clicks, first_index, rows, &probs, &labels);
  return auc(probs.data(), labels.data(), rows);
}

double planted_log_loss(const SyntheticClicks& clicks, int64_t first_index, int64_t rows) {
  std::vector<float> probs, labels;
  planted_sample(clicks, first_index, rows, &probs, &labels);
  return log_loss(probs.data(), labels.data(), rows);
}

}  // namespace cann::recsys
