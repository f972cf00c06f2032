// Dataset loading: turns a --data source (fortunes, text, llm.c token shards) into a training
// and a validation token stream, and reads and writes llm.c's shard format.
//
// Text is split by document, not by position, so that validation text is text the model never
// trained on even when the corpus holds a document twice (copies hash alike), and the split is a
// function of the content alone: adding a file, renaming one or changing the seed moves no other
// document.
// A text file whose lines include a lone "%" is read as fortune entries (this is what makes a
// directory of the user's own fortune files work like the built-in source); any other text is
// cut at blank lines. Shards carry no document boundaries, so a shard set without a "val" shard
// holds out the tail of its training tokens instead.
#include "data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "core/fs.h"
#include "core/numbers.h"
#include "data/tokenizer.h"

namespace cann::data {
namespace {

constexpr size_t kShardHeaderBytes = 256 * sizeof(int32_t);
constexpr int kMaxShardToken = 65535;
constexpr char kSourceHint[] =
    "hint: --data takes \"fortunes\", a text file, a directory of text files, or llm.c .bin "
    "token shards (one file or a directory of them)";

// FNV-1a, 64-bit (Fowler, Noll, Vo): fast, stable across platforms and releases, and mixes well
// enough that `hash % 10000` is close to uniform over documents.
uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}


// Decimal units, as disks and downloads are labelled: 2576674 -> "2.6 MB".
std::string human_bytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB"};
  if (n < 1000) return std::to_string(n) + " B";
  double value = static_cast<double>(n);
  int unit = -1;
  while (value >= 1000.0 && unit < 3) {
    value /= 1000.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

// 0.05 -> "0.05", not std::to_string's "0.050000".
std::string fraction_text(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", fraction);
  return buf;
}

std::string plural(uint64_t n, const char* noun) {
  return with_commas(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int max_token_of(const std::vector<int>& a, const std::vector<int>& b) {
  int max_token = -1;
  for (int t : a) max_token = std::max(max_token, t);
  for (int t : b) max_token = std::max(max_token, t);
  return max_token;
}

Status check_val_fraction(const std::string& label, double val_fraction) {
  if (val_fraction > 0.0 && val_fraction < 1.0) return OkStatus();
  return InvalidArgument(label + ": validation fraction " + fraction_text(val_fraction) +
                         " is outside (0, 1); hint: hold out a share such as 0.05");
}

// The header is little-endian on disk whatever the host is, so bytes are assembled by hand.
int32_t load_le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return static_cast<int32_t>(v);
}

void store_le32(char* p, int32_t value) {
  const uint32_t v = static_cast<uint32_t>(value);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A line without its end: CRLF files count "%\r" as "%" and "\r" as blank.
std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
  });
}

// Calls visit(line, line_begin, next_line_begin) for each line of text, without its '\n'.
template <typename Visit>
void for_each_line(std::string_view text, Visit&& visit) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t newline = text.find('\n', begin);
    const size_t end = newline == std::string_view::npos ? text.size() : newline;
    const size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    visit(text.substr(begin, end - begin), begin, next);
    begin = next;
  }
}

bool has_fortune_separator(std::string_view text) {
  bool found = false;
  for_each_line(
      text, [&](std::string_view line, size_t, size_t) { found = found || strip_cr(line) == "%"; });
  return found;
}

// Text documents routed to train or validation, with counts for the description.
struct TextSplit {
  double val_fraction = 0.05;
  std::string train;
  std::string val;
  uint64_t documents = 0;

  void add(std::string_view document) {
    while (!document.empty() && (document.back() == '\n' || document.back() == '\r'))
      document.remove_suffix(1);
    if (is_blank(document)) return;
    ++documents;
    // The bucket is compared in doubles so 0.05 means buckets 0..499 exactly as written.
    const bool to_val = static_cast<double>(fnv1a64(document) % 10000) < val_fraction * 10000.0;
    std::string& stream = to_val ? val : train;
    stream.append(document);
    // End the document's last line, then a blank line: the stream reads like the paragraphs it
    // came from, and the model sees where one document stops.
    stream.append("\n\n");
  }
};

void split_documents(std::string_view text, TextSplit& split) {
  const bool fortune_format = has_fortune_separator(text);
  size_t document_begin = 0;
  for_each_line(text, [&](std::string_view line, size_t begin, size_t next) {
    const bool separator = fortune_format ? strip_cr(line) == "%" : is_blank(line);
    if (!separator) return;
    split.add(text.substr(document_begin, begin - document_begin));
    document_begin = next;
  });
  split.add(text.substr(document_begin));
}

struct DirContents {
  std::vector<std::string> text_files;
  std::vector<std::string> shards;
};

// Symlinks are skipped for text because fortunes ships each file twice (art.u8 -> art) and a
// duplicate would put the same document in the stream twice; *.dat are fortune's binary indexes;
// hidden files are editor and VCS droppings. Shards may be symlinks: data directories are often
// assembled from links into a shared download.
StatusOr<DirContents> scan_directory(const std::string& dir) {
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(dir));
  DirContents contents;
  for (const std::string& name : names) {
    if (name.starts_with(".")) continue;
    const std::string path = join_path(dir, name);
    struct stat st {};
    if (name.ends_with(".bin")) {
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) contents.shards.push_back(path);
      continue;
    }
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.ends_with(".dat")) continue;
    contents.text_files.push_back(path);
  }
  return contents;
}

StatusOr<Dataset> load_text(const std::vector<std::string>& files, const std::string& label,
                            double val_fraction) {
  CANN_RETURN_IF_ERROR(check_val_fraction(label, val_fraction));
  TextSplit split;
  split.val_fraction = val_fraction;
  uint64_t bytes = 0;
  for (const std::string& file : files) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(file));
    bytes += text.size();
    split_documents(text, split);
  }
  if (split.documents == 0) {
    return InvalidArgument(label + ": no text: " + plural(files.size(), "file") +
                           " hold only blank lines; hint: point --data at a non-empty corpus");
  }
  if (split.val.empty()) {
    return InvalidArgument(
        label + ": the validation split is empty: 0 of " + plural(split.documents, "document") +
        " fell in the validation fraction " + fraction_text(val_fraction) +
        "; hint: supply more text (documents are blank-line separated paragraphs, or fortune "
        "entries) or raise the validation fraction");
  }
  if (split.train.empty()) {
    return InvalidArgument(label + ": the training split is empty: all " +
                           plural(split.documents, "document") +
                           " fell in the validation fraction " + fraction_text(val_fraction) +
                           "; hint: supply more text or lower the validation fraction");
  }
  Dataset ds;
  ds.train = encode_bytes(split.train);
  ds.val = encode_bytes(split.val);
  ds.byte_level = true;
  ds.max_token = max_token_of(ds.train, ds.val);
  ds.description = label + ": " + human_bytes(bytes) + " in " + plural(files.size(), "file") +
                   ", " + plural(split.documents, "document") + " (train " +
                   with_commas(ds.train.size()) + " tokens, val " + with_commas(ds.val.size()) +
                   " tokens)";
  return ds;
}

StatusOr<Dataset> load_shards(const std::vector<std::string>& paths, const std::string& label,
                              double val_fraction) {
  Dataset ds;
  uint64_t bytes = 0;
  size_t val_shards = 0;
  for (const std::string& path : paths) {
    CANN_ASSIGN_OR_RETURN(std::vector<int> tokens, read_llmc_shard(path));
    bytes += kShardHeaderBytes + 2 * tokens.size();
    // Only the file name decides: a parent directory named "interval" must not turn every
    // shard into validation.
    const bool is_val = base_name(path).find("val") != std::string::npos;
    val_shards += is_val ? 1 : 0;
    std::vector<int>& stream = is_val ? ds.val : ds.train;
    stream.insert(stream.end(), tokens.begin(), tokens.end());
  }
  if (ds.train.empty()) {
    return InvalidArgument(label + ": no training tokens in " + plural(paths.size(), "shard") +
                           " (files named *val* are validation); hint: add a training shard, "
                           "e.g. fineweb_train_000001.bin");
  }
  std::string val_note;
  if (val_shards == 0) {
    CANN_RETURN_IF_ERROR(check_val_fraction(label, val_fraction));
    const size_t n = ds.train.size();
    const size_t held_out = static_cast<size_t>(std::ceil(static_cast<double>(n) * val_fraction));
    if (held_out >= n) {
      return InvalidArgument(label + ": " + plural(n, "training token") +
                             " are too few to hold out a validation share; hint: add data or a "
                             "validation shard (a .bin file whose name contains \"val\")");
    }
    ds.val.assign(ds.train.end() - static_cast<std::ptrdiff_t>(held_out), ds.train.end());
    ds.train.resize(n - held_out);
    val_note = ", held out from the end of training: no *val* shard";
  }
  if (ds.val.empty()) {
    return InvalidArgument(label +
                           ": the validation shards hold no tokens; hint: regenerate "
                           "them, or remove them to hold out the end of the training tokens");
  }
  ds.byte_level = false;
  ds.max_token = max_token_of(ds.train, ds.val);
  ds.description = label + ": " + human_bytes(bytes) + " in " + plural(paths.size(), "shard") +
                   " (train " + with_commas(ds.train.size()) + " tokens, val " +
                   with_commas(ds.val.size()) + " tokens" + val_note + "; largest id " +
                   std::to_string(ds.max_token) + ")";
  return ds;
}

}  // namespace

StatusOr<Dataset> load_dataset(const std::string& source, double val_fraction) {
  if (source == "fortunes") {
    if (!is_directory(kFortunesDir)) {
      return NotFound(std::string(kFortunesDir) +
                      ": no such file or directory; hint: install Debian's fortunes package "
                      "(apt-get install fortunes), or pass --data with a path to your own text");
    }
    CANN_ASSIGN_OR_RETURN(DirContents contents, scan_directory(kFortunesDir));
    return load_text(contents.text_files, "fortunes", val_fraction);
  }
  if (!path_exists(source)) return NotFound(source + ": no such file or directory; " + kSourceHint);
  if (is_directory(source)) {
    CANN_ASSIGN_OR_RETURN(DirContents contents, scan_directory(source));
    if (!contents.shards.empty()) return load_shards(contents.shards, source, val_fraction);
    if (contents.text_files.empty()) {
      return InvalidArgument(source +
                             ": no text files or .bin shards in this directory (symlinks, hidden "
                             "files and *.dat indexes are skipped); " +
                             kSourceHint);
    }
    return load_text(contents.text_files, source, val_fraction);
  }
  if (source.ends_with(".bin")) return load_shards({source}, source, val_fraction);
  return load_text({source}, source, val_fraction);
}

StatusOr<std::vector<int>> read_llmc_shard(const std::string& path) {
  CANN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (bytes.size() < kShardHeaderBytes) {
    return DataLoss(path + ": truncated header: the file has " + with_commas(bytes.size()) +
                    " bytes but an llm.c shard header takes " + std::to_string(kShardHeaderBytes) +
                    "; hint: the file was cut short; regenerate or re-download it");
  }
  const int32_t magic = load_le32(bytes.data());
  if (magic != kShardMagic) {
    return DataLoss(path + ": bad magic " + std::to_string(magic) + " (expected " +
                    std::to_string(kShardMagic) +
                    "), so this is not an llm.c token shard; hint: give text files a name not "
                    "ending in .bin, or regenerate the shard with llm.c's data scripts");
  }
  const int32_t version = load_le32(bytes.data() + 4);
  if (version != kShardVersion) {
    return DataLoss(path + ": unsupported shard version " + std::to_string(version) +
                    " (this reader knows version " + std::to_string(kShardVersion) +
                    ", uint16 tokens); hint: regenerate the shard with llm.c's data scripts");
  }
  const int32_t count = load_le32(bytes.data() + 8);
  if (count < 0) {
    return DataLoss(path + ": header says " + std::to_string(count) +
                    " tokens; hint: the header is corrupt; regenerate the shard");
  }
  const uint64_t expected = kShardHeaderBytes + 2 * static_cast<uint64_t>(count);
  if (bytes.size() != expected) {
    return DataLoss(path + ": header says " + with_commas(count) + " tokens (" +
                    with_commas(expected) + " bytes with the header) but file has " +
                    with_commas(bytes.size()) +
                    " bytes; hint: the file is truncated or has trailing data; regenerate or "
                    "re-download it");
  }
  std::vector<int> tokens(static_cast<size_t>(count));
  const char* p = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] =
        static_cast<unsigned char>(p[2 * i]) | (static_cast<unsigned char>(p[2 * i + 1]) << 8);
  }
  return tokens;
}

Status write_llmc_shard(const std::string& path, const std::vector<int>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(path + ": " + with_commas(tokens.size()) +
                           " tokens do not fit one shard (the header's count is an int32); "
                           "hint: split the stream over several shards");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > kMaxShardToken) {
      return InvalidArgument(path + ": token " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(i) +
                             " is outside [0, 65535]; hint: llm.c shards store uint16 ids, so "
                             "the vocabulary must be under 65,536");
    }
  }
  std::string bytes(kShardHeaderBytes + 2 * tokens.size(), '\0');
  store_le32(bytes.data(), kShardMagic);
  store_le32(bytes.data() + 4, kShardVersion);
  store_le32(bytes.data() + 8, static_cast<int32_t>(tokens.size()));
  char* p = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    p[2 * i] = static_cast<char>(tokens[i] & 0xff);
    p[2 * i + 1] = static_cast<char>((tokens[i] >> 8) & 0xff);
  }
  return write_file_atomic(path, bytes);
}

}  // namespace cann::data
