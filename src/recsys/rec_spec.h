// The spec of a recommendation model: DLRM (Naumov et al. 2019: embedding bags and a bottom MLP
// meeting in pairwise dot products, a top MLP and a click logit) or a two-tower retrieval model
// (a user tower and an item tower over pooled embeddings, scored by their dot product over a
// temperature and trained with in-batch negatives). Read from YAML like the transformer specs,
// with the same rule: every key is honoured or refused, never skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/embedding_bag.h"

namespace cann::recsys {

enum class RecArchitecture { kDlrm, kTwoTower };

// Which candidates the two-tower softmax scores a user against: the other clicked items of the
// batch (in-batch negatives), or those and the batch's shown-but-not-clicked items as sampled
// negatives (their sampling distribution is the impression distribution, which the planted
// clicks are drawn from, so no log-q correction is needed between them).
enum class Negatives { kInBatch, kInBatchAndImpressions };

// How a two-tower model learns: a softmax over candidates (retrieval: it ranks items for a user,
// and learns no popularity or per-user offset, which cancel in the softmax), or binary
// cross-entropy on every impression with logit <u,v>/temperature (ranking: it learns the click
// probability of each impression, so its AUC over impressions is meaningful).
enum class TowerLoss { kSoftmax, kBce };

struct RecSpec {
  std::string name, source;
  RecArchitecture architecture = RecArchitecture::kDlrm;
  int dense_features = 13;
  int sparse_features = 26;     // one embedding table per sparse feature
  int user_features = 0;        // two-tower: features [0, user_features) feed the user tower
  int user_dense_features = 0;  // two-tower: dense features [0, this) feed the user tower, the
                                // rest the item tower
  int embedding_dim = 16;
  std::vector<int64_t> table_rows;  // one per sparse feature
  bool hash_ids = true;  // an id's row is a hash of the id modulo the rows; else the id itself
  kernels::BagPooling pooling = kernels::BagPooling::kSum;
  std::vector<int> bottom_mlp;  // DLRM: widths of the bottom MLP, the last = embedding_dim
  std::vector<int> top_mlp;     // DLRM: widths of the top MLP, the last = 1 (the click logit)
  std::vector<int> tower_mlp;   // two-tower: widths of each tower, the last = the score space
  float temperature = 0.05f;    // two-tower
  Negatives negatives = Negatives::kInBatch;
  TowerLoss tower_loss = TowerLoss::kSoftmax;

  int item_features() const { return sparse_features - user_features; }
  // Two-tower: the width of each tower's input (pooled bags, then its dense features).
  int user_tower_input() const { return user_features * embedding_dim + user_dense_features; }
  int item_tower_input() const {
    return item_features() * embedding_dim + dense_features - user_dense_features;
  }
  int64_t embedding_rows() const;
  int64_t dense_parameters() const;
};

// True when the YAML text names a recommendation architecture (dlrm, two_tower).
bool is_recsys_text(const std::string& text);
StatusOr<RecSpec> parse_rec_spec(const std::string& text, const std::string& source);
// A path, or a shipped name (configs/recsys/<name>.yaml, embedded in the binary).
StatusOr<RecSpec> load_rec_spec(const std::string& name_or_path);
// Whether name_or_path (a file or a shipped name) is a recommendation model's spec.
bool is_recsys_model(const std::string& name_or_path);
std::vector<std::string> shipped_rec_names();

// The row of table `rows` that id lands on (hash_ids: a 64-bit mix of the id, modulo rows).
inline int64_t table_row(int64_t id, int64_t rows, bool hash_ids) {
  if (!hash_ids) return id;
  uint64_t z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<int64_t>((z ^ (z >> 31)) % static_cast<uint64_t>(rows));
}

}  // namespace cann::recsys
