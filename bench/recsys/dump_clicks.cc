// Writes the synthetic click stream a recommendation spec trains on (recsys/rec_trainer.h's
// synthetic_spec_for, the same positions cann-train reads) to a binary file, so a peer engine
// trains on exactly the impressions cann-train trains on and is judged on the same held-out ones.
//
// File: "CLK1" magic, uint32 version 1, int64 train rows, int64 eval rows, int32 dense features,
// int32 sparse features, float planted ceiling AUC of the eval rows; then train rows and eval
// rows, each row: float label, `dense` floats, `sparse` int64 table rows (one id per bag, already
// mapped to its table row as the engine maps it).
//
//   dump_clicks SPEC TRAIN_ROWS EVAL_ROWS SEED OUT
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "recsys/rec_spec.h"
#include "recsys/rec_trainer.h"
#include "recsys/synthetic_clicks.h"

using namespace cann::recsys;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: dump_clicks SPEC TRAIN_ROWS EVAL_ROWS SEED OUT\n");
    return 2;
  }
  auto spec = load_rec_spec(argv[1]);
  if (!spec.ok()) {
    std::fprintf(stderr, "dump_clicks: %s\n", spec.status().message().c_str());
    return 2;
  }
  const int64_t train = std::atoll(argv[2]), eval = std::atoll(argv[3]);
  auto gen_spec = synthetic_spec_for(*spec, std::strtoull(argv[4], nullptr, 10));
  if (!gen_spec.ok()) {
    std::fprintf(stderr, "dump_clicks: %s\n", gen_spec.status().message().c_str());
    return 2;
  }
  SyntheticClicks gen(*gen_spec);
  std::FILE* out = std::fopen(argv[5], "wb");
  if (!out) {
    std::perror(argv[5]);
    return 1;
  }
  const int D = gen.dense_features(), F = gen.sparse_features();
  const float ceiling = static_cast<float>(planted_auc(gen, kSyntheticEvalPosition, eval));
  const uint32_t version = 1;
  std::fwrite("CLK1", 1, 4, out);
  std::fwrite(&version, 4, 1, out);
  std::fwrite(&train, 8, 1, out);
  std::fwrite(&eval, 8, 1, out);
  std::fwrite(&D, 4, 1, out);
  std::fwrite(&F, 4, 1, out);
  std::fwrite(&ceiling, 4, 1, out);
  ClickBatch b;
  std::vector<char> row(4 + 4 * D + 8 * F);
  for (const auto& [first, count] : {std::pair{int64_t{0}, train}, {kSyntheticEvalPosition, eval}})
    for (int64_t done = 0; done < count; done += 4096) {
      const int n = static_cast<int>(std::min<int64_t>(4096, count - done));
      gen.fill(first + done, n, &b);
      for (int r = 0; r < n; ++r) {
        char* p = row.data();
        std::memcpy(p, &b.labels[r], 4);
        std::memcpy(p + 4, &b.dense[static_cast<size_t>(r) * D], 4 * D);
        for (int f = 0; f < F; ++f) {
          const int64_t id = b.ids[b.bag_begin(r, f)];
          const int64_t t = table_row(id, spec->table_rows[f], spec->hash_ids);
          std::memcpy(p + 4 + 4 * D + 8 * f, &t, 8);
        }
        std::fwrite(row.data(), 1, row.size(), out);
      }
    }
  if (std::fclose(out) != 0) {
    std::perror(argv[5]);
    return 1;
  }
  std::printf("%lld train and %lld eval rows to %s (planted ceiling AUC %.4f)\n",
              static_cast<long long>(train), static_cast<long long>(eval), argv[5], ceiling);
  return 0;
}
