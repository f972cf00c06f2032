// Datasets: a stream of token ids for training and one for validation.
//
// Sources (the --data flag):
// - "fortunes": the text of Debian's fortunes package (/usr/share/games/fortunes), byte-level.
// - a text file: byte-level.
// - a directory of text files: every regular file (not symlinks, hidden files or *.dat index
//   files, not subdirectories), in sorted name order, byte-level.
// - an llm.c token shard (*.bin), or a directory of them (a directory holding any *.bin file is
//   read as shards alone): files whose name contains "val" are validation, the rest training
//   (llm.c's fineweb_train_000001.bin / fineweb_val_000000.bin).
//
// Text is split into train and validation deterministically: the text is cut into documents
// (fortune entries separated by a line holding only "%", in any file that has such a line;
// otherwise blank-line separated paragraphs), and a document goes to validation when a hash of
// its bytes falls in the validation fraction. The split depends only on the content, never on
// file order or seeds. A shard set with no "val" shard holds out the last val_fraction of its
// training tokens instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::data {

inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";

struct Dataset {
  std::vector<int> train;
  std::vector<int> val;
  int max_token = -1;       // largest id in train or val (checked against the model's vocab)
  bool byte_level = false;  // text sources
  std::string description;  // "fortunes: 2.6 MB in 43 files, 15,217 documents (train ...)"
};

// Loads a dataset as described above. val_fraction is the share of documents held out for text
// sources. Errors: missing path (NotFound, exit 2), empty corpus, malformed shard (DataLoss).
StatusOr<Dataset> load_dataset(const std::string& source, double val_fraction = 0.05);

// llm.c shard format: a header of 256 little-endian int32 (magic 20240520, version 1, token
// count, rest zero), then `count` uint16 tokens. The file size must match exactly.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
StatusOr<std::vector<int>> read_llmc_shard(const std::string& path);
// Writes a shard (used by tests and by users converting data).
Status write_llmc_shard(const std::string& path, const std::vector<int>& tokens);

}  // namespace cann::data
