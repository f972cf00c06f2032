// The recommendation models end to end at small sizes: every dense tensor's gradient and every
// pulled row's gradient against central differences of the loss (as tests/model_grad_check.h
// does for the transformers), the sparse optimizers against their formulas, row deduplication,
// the specs (shipped ones load, bad ones fail in one line), and training on planted clicks
// reaching close to the best achievable AUC.
//
// Tolerance of the gradient checks: the loss is a double mean of fp32 per-example losses
// (relative rounding ~1e-6 after a few hundred fp32 operations); with step h = 3e-3 along a unit
// direction, the difference quotient's noise is ~3e-4 and its truncation error h^2 |f'''| is
// smaller for these small smooth models, except where a ReLU's kink falls between the two
// evaluations, which the small step makes rare (and a fixed seed deterministic; the worst error
// here is ~1e-4). tol = 5e-2 of |g_t| (floor 4e-2 in absolute terms) catches any real error,
// which shows up at O(|g_t|).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "recsys/embedding_store.h"
#include "recsys/local_store.h"
#include "recsys/rec_model.h"
#include "recsys/rec_spec.h"
#include "recsys/rec_trainer.h"
#include "recsys/synthetic_clicks.h"

namespace cann::recsys {
namespace {

RecSpec spec_of(const std::string& yaml) {
  auto s = parse_rec_spec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

const char* kDlrm = R"(architecture: dlrm
dense_features: 5
sparse_features: 4
table_rows: [50, 7, 40, 7]
hash_ids: false
embedding_dim: 6
pooling: mean
bottom_mlp: [9, 6]
top_mlp: [8, 1]
)";

const char* kTwoTower = R"(architecture: two_tower
sparse_features: 4
user_features: 2
table_rows: [50, 7, 40, 7]
hash_ids: false
embedding_dim: 6
pooling: sum
tower_mlp: [9, 5]
temperature: 0.5
)";

// A batch of B impressions from the generator, with a few extra ids in some bags (multi-hot,
// repeated ids) so pooling and deduplication are exercised beyond one id per bag.
ClickBatch make_batch(const RecSpec& spec, int B, uint64_t seed) {
  auto g = synthetic_spec_for(spec, seed);
  EXPECT_TRUE(g.ok()) << g.status().message();
  g->bias = 0.0;  // about half clicks
  SyntheticClicks gen(*g);
  ClickBatch one;
  gen.fill(0, B, &one);
  ClickBatch b = one;
  b.ids.clear();
  b.offsets.assign(1, 0);
  const int F = spec.sparse_features;
  for (int f = 0; f < F; ++f)
    for (int r = 0; r < B; ++r) {
      b.ids.push_back(one.ids[one.bag_begin(r, f)]);
      if (r % 3 == 1) b.ids.push_back(one.ids[one.bag_begin((r + 1) % B, f)]);
      if (r % 4 == 2) b.ids.push_back(one.ids[one.bag_begin(r, f)]);  // the same id twice
      b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
    }
  return b;
}

// Central difference of the loss along unit direction d in x, in double.
double directional_fd(std::vector<float>& x, const std::vector<double>& d,
                      const std::function<double()>& loss, double h) {
  std::vector<float> keep = x;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(keep[i] + h * d[i]);
  const double lp = loss();
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(keep[i] - h * d[i]);
  const double lm = loss();
  x = keep;
  return (lp - lm) / (2 * h);
}

// Checks gradient g of loss at x along a random unit direction and along g itself.
void check_tensor(std::vector<float>& x, const std::vector<float>& g,
                  const std::function<double()>& loss, const std::string& what, Rng& rng) {
  double gn = 0;
  for (float v : g) gn += static_cast<double>(v) * v;
  gn = std::sqrt(gn);
  std::vector<double> dirs[2];
  dirs[0].resize(x.size());
  double n0 = 0;
  for (auto& v : dirs[0]) {
    v = rng.normal();
    n0 += v * v;
  }
  for (auto& v : dirs[0]) v /= std::sqrt(n0);
  dirs[1].resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) dirs[1][i] = gn > 0 ? g[i] / gn : 0.0;
  double worst = 0;
  for (const auto& d : dirs) {
    double analytic = 0;
    for (size_t i = 0; i < x.size(); ++i) analytic += g[i] * d[i];
    const double fd = directional_fd(x, d, loss, 3e-3);
    worst = std::max(worst, std::abs(fd - analytic) / std::max(gn, 4e-2));
  }
  std::printf("  %-28s |g| %.3e  rel err %.2e\n", what.c_str(), gn, worst);
  EXPECT_LT(worst, 5e-2) << what;
}

void check_model_gradients(const RecSpec& spec, const ClickBatch& batch) {
  set_num_threads(2);
  RecModel model(spec, 7);
  ShardConfig rows;
  rows.seed = 7;
  LocalEmbeddingStore store(spec, rows);
  PulledRows pulled;
  ASSERT_TRUE(index_batch(spec, batch, &pulled).ok());
  ASSERT_TRUE(store.pull(&pulled).ok());
  // Larger rows than the initialization's +-sqrt(1/rows), so the dot products carry signal.
  Rng rng(3);
  for (auto& p : pulled)
    for (auto& v : p.rows) v = 0.5f * rng.normal();
  RowGrads row_grads, scratch;
  std::fill(model.dense_grad(), model.dense_grad() + model.num_dense(), 0.0f);
  const double loss0 = model.forward_backward(batch, pulled, &row_grads);
  EXPECT_TRUE(std::isfinite(loss0));
  const std::vector<float> dense_grad(model.dense_grad(), model.dense_grad() + model.num_dense());
  auto loss = [&] { return model.forward_backward(batch, pulled, &scratch); };
  // Dense: tensor by tensor, each through a copy that the loss writes back into the buffer.
  for (const DenseTensor& t : model.dense_tensors()) {
    std::vector<float> x(model.dense() + t.offset, model.dense() + t.offset + t.size);
    const std::vector<float> g(dense_grad.begin() + t.offset,
                               dense_grad.begin() + t.offset + t.size);
    auto tensor_loss = [&] {
      std::copy(x.begin(), x.end(), model.dense() + t.offset);
      return loss();
    };
    check_tensor(x, g, tensor_loss, t.name, rng);
    std::copy(x.begin(), x.end(), model.dense() + t.offset);
  }
  for (int f = 0; f < spec.sparse_features; ++f)
    check_tensor(pulled[f].rows, row_grads[f], loss, "rows of sparse feature " + std::to_string(f),
                 rng);
}

TEST(RecModelGradients, DlrmMeanPooling) {
  const RecSpec spec = spec_of(kDlrm);
  check_model_gradients(spec, make_batch(spec, 12, 1));
}

TEST(RecModelGradients, DlrmSumPooling) {
  std::string yaml = kDlrm;
  yaml.replace(yaml.find("pooling: mean"), 13, "pooling: sum ");
  const RecSpec spec = spec_of(yaml);
  check_model_gradients(spec, make_batch(spec, 9, 2));
}

TEST(RecModelGradients, TwoTowerInBatchNegatives) {
  const RecSpec spec = spec_of(kTwoTower);
  check_model_gradients(spec, make_batch(spec, 14, 3));
}

TEST(RecModelGradients, TwoTowerWithImpressionNegatives) {
  const RecSpec spec = spec_of(std::string(kTwoTower) + "negatives: in_batch_and_impressions\n");
  check_model_gradients(spec, make_batch(spec, 14, 4));
}

TEST(RecModelGradients, TwoTowerWithDenseFeaturesAndPointwiseLoss) {
  // Dense features 0 and 1 feed the user tower, 2 the item tower; binary cross-entropy on every
  // impression.
  const RecSpec spec =
      spec_of(std::string(kTwoTower) + "dense_features: 3\nuser_dense_features: 2\nloss: bce\n");
  EXPECT_EQ(spec.user_tower_input(), 2 * 6 + 2);
  EXPECT_EQ(spec.item_tower_input(), 2 * 6 + 1);
  check_model_gradients(spec, make_batch(spec, 10, 8));
}

TEST(RecModel, TwoTowerBatchWithoutClicksHasNoGradient) {
  const RecSpec spec = spec_of(kTwoTower);
  ClickBatch b = make_batch(spec, 6, 5);
  std::fill(b.labels.begin(), b.labels.end(), 0.0f);
  RecModel model(spec, 1);
  LocalEmbeddingStore store(spec);
  PulledRows pulled;
  ASSERT_TRUE(index_batch(spec, b, &pulled).ok());
  ASSERT_TRUE(store.pull(&pulled).ok());
  RowGrads g;
  EXPECT_EQ(model.forward_backward(b, pulled, &g), 0.0);
  for (int64_t i = 0; i < model.num_dense(); ++i) ASSERT_EQ(model.dense_grad()[i], 0.0f);
  for (const auto& rows : g)
    for (float v : rows) ASSERT_EQ(v, 0.0f);
}

// ---------------------------------------------------------------------------- rows and optimizers

TEST(EmbeddingStore, IndexBatchDeduplicatesRowsPerFeature) {
  const RecSpec spec = spec_of(kDlrm);
  ClickBatch b;
  b.batch = 3;
  b.sparse_features = 4;
  // Feature 0: bags {5, 9}, {9}, {5, 5, 2}; features 1..3: one id each.
  b.ids = {5, 9, 9, 5, 5, 2, 1, 2, 1, 3, 3, 3, 0, 6, 0};
  b.offsets = {0, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  PulledRows p;
  ASSERT_TRUE(index_batch(spec, b, &p).ok());
  EXPECT_EQ(p[0].row_ids, (std::vector<int64_t>{2, 5, 9}));
  EXPECT_EQ(p[0].row_index, (std::vector<int32_t>{1, 2, 2, 1, 1, 0}));
  EXPECT_EQ(p[2].row_ids, (std::vector<int64_t>{3}));
  EXPECT_EQ(p[3].row_ids, (std::vector<int64_t>{0, 6}));
}

TEST(EmbeddingStore, UnhashedIdOutsideItsTableIsOneLine) {
  const RecSpec spec = spec_of(kDlrm);
  ClickBatch b;
  b.batch = 1;
  b.sparse_features = 4;
  b.ids = {1, 1, 40, 1};  // table 2 has 40 rows: id 40 is one past its end
  b.offsets = {0, 1, 2, 3, 4};
  PulledRows p;
  const Status s = index_batch(spec, b, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sparse feature 2: id 40 is outside its table's 40 rows"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("hint: set hash_ids: true"), std::string::npos);
}

TEST(SparseOptimizers, RowwiseAdagradAndLazyAdamFollowTheirFormulas) {
  const int C = 3;
  const float g[C] = {0.3f, -0.6f, 1.2f};
  SparseOptimizerConfig ada;
  ada.lr = 0.1f;
  float w[C] = {1, 2, 3}, acc = 0.5f;
  sparse_update_row(w, &acc, g, C, ada);
  const double want_acc = 0.5 + (0.09 + 0.36 + 1.44) / 3;
  EXPECT_NEAR(acc, want_acc, 1e-6);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(w[c], (c + 1) - 0.1 * g[c] / std::sqrt(want_acc), 1e-6);

  SparseOptimizerConfig adam;
  adam.kind = SparseOptimizer::kLazyAdam;
  adam.lr = 0.01f;
  std::vector<float> state(sparse_state_width(adam.kind, C), 0.0f);
  float w2[C] = {1, 2, 3};
  sparse_update_row(w2, state.data(), g, C, adam);
  sparse_update_row(w2, state.data(), g, C, adam);
  // Two identical gradients: m_hat = g, v_hat = g^2 each time, so each step moves lr * sign(g).
  for (int c = 0; c < C; ++c) EXPECT_NEAR(w2[c], (c + 1) - 2 * 0.01 * (g[c] > 0 ? 1 : -1), 1e-5);
  EXPECT_EQ(state[2 * C], 2.0f);  // the row's own update count
}

TEST(EmbeddingStore, RowsStartTheSameWhereverTheyLive) {
  float a[4], b[4];
  init_row(a, 4, 1000, 9, 2, 777);
  init_row(b, 4, 1000, 9, 2, 777);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(a[c], b[c]);
    EXPECT_LE(std::abs(a[c]), std::sqrt(1.0 / 1000));
  }
  init_row(b, 4, 1000, 9, 3, 777);
  EXPECT_NE(a[0], b[0]);
}

// ------------------------------------------------------------------------------------------ specs

TEST(RecSpecs, ShippedSpecsLoad) {
  const auto names = shipped_rec_names();
  EXPECT_GE(names.size(), 4u);
  for (const auto& n : names) {
    auto s = load_rec_spec(n);
    ASSERT_TRUE(s.ok()) << n << ": " << s.status().message();
    EXPECT_TRUE(is_recsys_model(n));
    std::printf("  %-22s %lld dense parameters, %lld embedding rows\n", n.c_str(),
                static_cast<long long>(s->dense_parameters()),
                static_cast<long long>(s->embedding_rows()));
  }
  // The DLRM reference's Kaggle model: 13-512-256-64-16 bottom, 512-256-1 top over 16 + 27*26/2.
  auto k = load_rec_spec("dlrm_criteo_kaggle");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->dense_parameters(), (13 * 512 + 512) + (512 * 256 + 256) + (256 * 64 + 64) +
                                       (64 * 16 + 16) + (367 * 512 + 512) + (512 * 256 + 256) +
                                       (256 + 1));
  EXPECT_EQ(k->embedding_rows(), 33762577);
  EXPECT_FALSE(is_recsys_model("gpt_tiny"));
}

TEST(RecSpecs, BadSpecsSayWhatToDo) {
  struct Case {
    std::string yaml, expect;
  };
  const std::string base = "architecture: dlrm\nsparse_features: 2\ntable_rows: 10\n";
  const std::vector<Case> cases = {
      {base + "bottom_mlp: [8, 4]\ntop_mlp: [4, 1]\n", "bottom_mlp: ends in 4"},
      {base + "embedding_dim: 4\nbottom_mlp: [8, 4]\ntop_mlp: [4, 2]\n", "top_mlp: ends in 2"},
      {base + "embedding_dim: 4\nbottom_mlp: [8, 4]\ntop_mlp: [4, 1]\ntower_mlp: [3]\n",
       "tower_mlp: belongs to two_tower"},
      {base + "embedding_dim: 4\nbottom_mlp: [8, 4]\ntop_mlp: [4, 1]\nvocab_size: 3\n",
       "vocab_size: unknown key"},
      {"architecture: dlrm\nsparse_features: 3\ntable_rows: [1, 2]\nbottom_mlp: [16]\ntop_mlp: "
       "[1]\n",
       "2 tables for 3 sparse features"},
      {"architecture: two_tower\nsparse_features: 2\nuser_features: 2\ntable_rows: 5\n"
       "tower_mlp: [4]\n",
       "user_features: must leave at least one feature to each tower"},
      {"architecture: two_tower\nsparse_features: 2\nuser_features: 1\ntable_rows: 5\n"
       "tower_mlp: [4]\npooling: max\n",
       "pooling: 'max' is unknown"},
      {"architecture: two_tower\nsparse_features: 2\nuser_features: 1\ntable_rows: 5\n"
       "tower_mlp: [4]\ndense_features: 2\nuser_dense_features: 3\n",
       "user_dense_features: 3 of 2 dense features"},
      {"architecture: dlrm\nembedding_dim: [3\n", "malformed YAML"},
  };
  for (const auto& c : cases) {
    auto s = parse_rec_spec(c.yaml, "bad.yaml");
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.expect), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
    EXPECT_NE(s.status().message().find("hint"), std::string::npos) << s.status().message();
  }
}

// --------------------------------------------------------------------------------------- training

// Small id spaces (2000 users, 1000 items, 100 groups per side) so 1.5M impressions see every
// id often: the gap left to the planted ceiling is then the model's, not the data's. (With the
// tiny configs' 20000 users the same run ends about 0.045 below its ceiling and closes it
// slowly with more impressions: the rare users are seen a few times each.)
RecSpec small_spec(const std::string& arch_lines) {
  return spec_of(arch_lines +
                 "sparse_features: 4\ntable_rows: [2000, 100, 1000, 100]\n"
                 "hash_ids: false\n");
}

RecRunSummary train_small(const RecSpec& spec, int steps) {
  set_num_threads(2);
  RecTrainConfig config;
  config.steps = steps;
  config.batch_size = 512;
  config.sparse.lr = 0.1f;
  config.eval_interval = 0;
  config.eval_rows = 50000;
  config.log_interval = steps / 3;
  auto summary = train_recsys(spec, config, stdout);
  EXPECT_TRUE(summary.ok()) << summary.status().message();
  return summary.ok() ? *summary : RecRunSummary{};
}

TEST(RecTraining, DlrmApproachesThePlantedCeiling) {
  const RecSpec spec = small_spec(
      "architecture: dlrm\ndense_features: 13\nembedding_dim: 16\nbottom_mlp: [64, 16]\n"
      "top_mlp: [64, 1]\n");
  const RecRunSummary s = train_small(spec, 3000);
  EXPECT_LT(s.last_loss, s.first_loss);
  EXPECT_GT(s.ceiling_auc, 0.8);
  EXPECT_GT(s.auc, s.ceiling_auc - 0.025);
  EXPECT_LT(s.log_loss, s.ceiling_log_loss + 0.03);
}

TEST(RecTraining, TwoTowerWithBceApproachesThePlantedCeiling) {
  const RecSpec spec = small_spec(
      "architecture: two_tower\nuser_features: 2\nembedding_dim: 32\ntower_mlp: [64, 32]\n"
      "temperature: 0.1\nloss: bce\n");
  const RecRunSummary s = train_small(spec, 3000);
  EXPECT_GT(s.auc, s.ceiling_auc - 0.025);
}

TEST(RecTraining, TwoTowerWithInBatchSoftmaxLearnsToRank) {
  // The softmax cancels every user's offset and the items' popularity, so its scores rank the
  // items of one user, and the AUC over impressions of many users stays well under the ceiling;
  // it still learns the interaction: far above chance.
  const RecSpec spec = small_spec(
      "architecture: two_tower\nuser_features: 2\nembedding_dim: 32\ntower_mlp: [64, 32]\n"
      "temperature: 0.1\n");
  const RecRunSummary s = train_small(spec, 1500);
  EXPECT_LT(s.last_loss, s.first_loss);
  EXPECT_GT(s.auc, 0.62);
}

}  // namespace
}  // namespace cann::recsys
