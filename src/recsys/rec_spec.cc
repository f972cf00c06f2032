// Reading a recommendation model's spec (rec_spec.h): each key typed and range-checked, each
// architecture's keys refused on the other, and the widths checked where they must meet (the
// bottom MLP's output is an embedding, the top MLP ends in one logit, both towers end in the
// same score space).
#include "recsys/rec_spec.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "core/embedded.h"
#include "core/fs.h"

namespace cann::recsys {
namespace {

Status key_error(const std::string& source, const std::string& key, const std::string& what) {
  return InvalidArgument(source + ": " + key + ": " + what);
}

StatusOr<int64_t> read_count(const YAML::Node& v, const std::string& source, const std::string& key,
                             int64_t lo, int64_t hi) {
  int64_t x = 0;
  try {
    if (!v.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    x = v.as<int64_t>();
  } catch (const YAML::Exception&) {
    return key_error(source, key, "expected an integer; hint: write a whole number");
  }
  if (x < lo || x > hi)
    return key_error(source, key,
                     std::to_string(x) + " is out of range; hint: use " + std::to_string(lo) +
                         ".." + std::to_string(hi));
  return x;
}

StatusOr<std::vector<int>> read_widths(const YAML::Node& v, const std::string& source,
                                       const std::string& key) {
  if (!v.IsSequence() || v.size() == 0)
    return key_error(source, key, "expected a non-empty list of layer widths, e.g. [64, 16]");
  std::vector<int> w;
  for (const auto& item : v) {
    CANN_ASSIGN_OR_RETURN(int64_t x, read_count(item, source, key, 1, 1 << 20));
    w.push_back(static_cast<int>(x));
  }
  return w;
}

StatusOr<std::string> read_word(const YAML::Node& v, const std::string& source,
                                const std::string& key) {
  if (!v.IsScalar()) return key_error(source, key, "expected a word");
  return v.as<std::string>();
}

int64_t mlp_parameters(int in, const std::vector<int>& widths) {
  int64_t n = 0;
  for (int w : widths) {
    n += static_cast<int64_t>(in) * w + w;
    in = w;
  }
  return n;
}

}  // namespace

int64_t RecSpec::embedding_rows() const {
  int64_t n = 0;
  for (int64_t r : table_rows) n += r;
  return n;
}

int64_t RecSpec::dense_parameters() const {
  if (architecture == RecArchitecture::kTwoTower)
    return mlp_parameters(user_tower_input(), tower_mlp) +
           mlp_parameters(item_tower_input(), tower_mlp);
  const int n = sparse_features + 1;
  return mlp_parameters(dense_features, bottom_mlp) +
         mlp_parameters(embedding_dim + n * (n - 1) / 2, top_mlp);
}

bool is_recsys_text(const std::string& text) {
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["architecture"] || !root["architecture"].IsScalar()) return false;
    const std::string a = root["architecture"].as<std::string>();
    return a == "dlrm" || a == "two_tower";
  } catch (const YAML::Exception&) {
    return false;
  }
}

StatusOr<RecSpec> parse_rec_spec(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                           ": malformed YAML: " + e.msg + "; hint: fix the syntax at that line");
  }
  if (!root.IsMap())
    return InvalidArgument(source +
                           ": expected a mapping of keys to values; hint: see "
                           "configs/recsys/dlrm_tiny.yaml");
  RecSpec s;
  s.source = source;
  s.name = std::filesystem::path(source).stem().string();
  if (!root["architecture"])
    return key_error(source, "architecture", "missing; hint: set dlrm or two_tower");
  CANN_ASSIGN_OR_RETURN(std::string arch, read_word(root["architecture"], source, "architecture"));
  if (arch == "dlrm") {
    s.architecture = RecArchitecture::kDlrm;
  } else if (arch == "two_tower") {
    s.architecture = RecArchitecture::kTwoTower;
    s.dense_features = 0;
  } else {
    return key_error(source, "architecture",
                     "'" + arch + "' is not a recommendation model; hint: use dlrm or two_tower");
  }
  const bool dlrm = s.architecture == RecArchitecture::kDlrm;
  const std::set<std::string> dlrm_only = {"bottom_mlp", "top_mlp"};
  const std::set<std::string> tower_only = {"user_features", "user_dense_features", "tower_mlp",
                                            "temperature",   "negatives",           "loss"};
  YAML::Node rows_node;
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    if ((dlrm && tower_only.count(key)) || (!dlrm && dlrm_only.count(key)))
      return key_error(source, key,
                       "belongs to " + std::string(dlrm ? "two_tower" : "dlrm") + ", not " + arch +
                           "; hint: remove it");
    if (key == "architecture") continue;
    if (key == "dense_features") {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(v, source, key, 0, 1 << 16));
      s.dense_features = static_cast<int>(x);
    } else if (key == "sparse_features") {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(v, source, key, 1, 4096));
      s.sparse_features = static_cast<int>(x);
    } else if (key == "user_dense_features") {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(v, source, key, 0, 1 << 16));
      s.user_dense_features = static_cast<int>(x);
    } else if (key == "user_features") {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(v, source, key, 1, 4096));
      s.user_features = static_cast<int>(x);
    } else if (key == "embedding_dim") {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(v, source, key, 1, 4096));
      s.embedding_dim = static_cast<int>(x);
    } else if (key == "table_rows") {
      rows_node = v;
    } else if (key == "hash_ids") {
      try {
        s.hash_ids = v.as<bool>();
      } catch (const YAML::Exception&) {
        return key_error(source, key, "expected true or false");
      }
    } else if (key == "pooling") {
      CANN_ASSIGN_OR_RETURN(std::string p, read_word(v, source, key));
      if (p != "sum" && p != "mean")
        return key_error(source, key, "'" + p + "' is unknown; hint: use sum or mean");
      s.pooling = p == "sum" ? kernels::BagPooling::kSum : kernels::BagPooling::kMean;
    } else if (key == "bottom_mlp") {
      CANN_ASSIGN_OR_RETURN(s.bottom_mlp, read_widths(v, source, key));
    } else if (key == "top_mlp") {
      CANN_ASSIGN_OR_RETURN(s.top_mlp, read_widths(v, source, key));
    } else if (key == "tower_mlp") {
      CANN_ASSIGN_OR_RETURN(s.tower_mlp, read_widths(v, source, key));
    } else if (key == "temperature") {
      double t = 0;
      try {
        t = v.as<double>();
      } catch (const YAML::Exception&) {
        return key_error(source, key, "expected a number");
      }
      if (!(t > 0 && t <= 100)) return key_error(source, key, "must be in (0, 100]");
      s.temperature = static_cast<float>(t);
    } else if (key == "negatives") {
      CANN_ASSIGN_OR_RETURN(std::string n, read_word(v, source, key));
      if (n == "in_batch")
        s.negatives = Negatives::kInBatch;
      else if (n == "in_batch_and_impressions")
        s.negatives = Negatives::kInBatchAndImpressions;
      else
        return key_error(source, key,
                         "'" + n + "' is unknown; hint: use in_batch or in_batch_and_impressions");
    } else if (key == "loss") {
      CANN_ASSIGN_OR_RETURN(std::string n, read_word(v, source, key));
      if (n == "softmax")
        s.tower_loss = TowerLoss::kSoftmax;
      else if (n == "bce")
        s.tower_loss = TowerLoss::kBce;
      else
        return key_error(source, key, "'" + n + "' is unknown; hint: use softmax or bce");
    } else {
      return key_error(source, key,
                       "unknown key for a recommendation model; hint: see "
                       "configs/recsys/dlrm_tiny.yaml and two_tower_tiny.yaml for the keys");
    }
  }
  // Tables: one row count for every table, or one per sparse feature.
  if (!rows_node) return key_error(source, "table_rows", "missing; hint: give the rows per table");
  if (rows_node.IsSequence()) {
    if (static_cast<int>(rows_node.size()) != s.sparse_features)
      return key_error(source, "table_rows",
                       std::to_string(rows_node.size()) + " tables for " +
                           std::to_string(s.sparse_features) +
                           " sparse features; hint: give one row count per feature, or one "
                           "number for all");
    for (const auto& r : rows_node) {
      CANN_ASSIGN_OR_RETURN(int64_t x, read_count(r, source, "table_rows", 1, int64_t{1} << 40));
      s.table_rows.push_back(x);
    }
  } else {
    CANN_ASSIGN_OR_RETURN(int64_t x,
                          read_count(rows_node, source, "table_rows", 1, int64_t{1} << 40));
    s.table_rows.assign(s.sparse_features, x);
  }
  if (dlrm) {
    if (s.bottom_mlp.empty() || s.top_mlp.empty())
      return key_error(source, s.bottom_mlp.empty() ? "bottom_mlp" : "top_mlp",
                       "missing; hint: DLRM needs both MLPs, e.g. bottom_mlp: [64, 16] and "
                       "top_mlp: [64, 1]");
    if (s.dense_features == 0)
      return key_error(source, "dense_features",
                       "0: DLRM's bottom MLP reads the dense features; hint: give their count");
    if (s.bottom_mlp.back() != s.embedding_dim)
      return key_error(source, "bottom_mlp",
                       "ends in " + std::to_string(s.bottom_mlp.back()) +
                           ", but its output meets the embeddings in dot products; hint: end it "
                           "in embedding_dim (" +
                           std::to_string(s.embedding_dim) + ")");
    if (s.top_mlp.back() != 1)
      return key_error(
          source, "top_mlp",
          "ends in " + std::to_string(s.top_mlp.back()) + "; hint: end it in 1, the click logit");
  } else {
    if (s.tower_mlp.empty())
      return key_error(source, "tower_mlp", "missing; hint: e.g. tower_mlp: [64, 32]");
    if (s.tower_loss == TowerLoss::kBce && root["negatives"])
      return key_error(source, "negatives",
                       "chooses the softmax's candidates, but loss is bce, which scores every "
                       "impression alone; hint: remove negatives, or use loss: softmax");
    if (s.user_dense_features > s.dense_features)
      return key_error(source, "user_dense_features",
                       std::to_string(s.user_dense_features) + " of " +
                           std::to_string(s.dense_features) +
                           " dense features; hint: dense features [0, user_dense_features) feed "
                           "the user tower, the rest the item tower");
    if (s.user_features == 0 || s.user_features >= s.sparse_features)
      return key_error(source, "user_features",
                       "must leave at least one feature to each tower (sparse_features " +
                           std::to_string(s.sparse_features) +
                           "); hint: features [0, user_features) are the user's");
  }
  return s;
}

std::vector<std::string> shipped_rec_names() {
  return embedded_names("configs/recsys", ".yaml");
}

StatusOr<RecSpec> load_rec_spec(const std::string& name_or_path) {
  if (path_exists(name_or_path)) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(name_or_path));
    return parse_rec_spec(text, name_or_path);
  }
  const std::string rel = "configs/recsys/" + name_or_path + ".yaml";
  if (auto text = embedded_file(rel)) {
    auto s = parse_rec_spec(std::string(*text), rel);
    if (s.ok()) s->name = name_or_path;
    return s;
  }
  std::string names;
  for (const auto& n : shipped_rec_names()) names += (names.empty() ? "" : ", ") + n;
  return NotFound("recommendation model '" + name_or_path +
                  "' is neither a file nor a shipped model; hint: use one of " + names);
}

bool is_recsys_model(const std::string& name_or_path) {
  if (path_exists(name_or_path)) {
    auto text = read_file(name_or_path);
    return text.ok() && is_recsys_text(*text);
  }
  return embedded_file("configs/recsys/" + name_or_path + ".yaml").has_value();
}

}  // namespace cann::recsys
