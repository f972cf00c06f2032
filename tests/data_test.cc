// Tests for src/data: the byte tokenizer and dataset loading (fortunes, text files and
// directories, llm.c shards and every way a shard can be malformed). The sampler and the
// masked-LM corruption are sampler_test.cc's.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace cann::data {
namespace {

using test::TempDir;
using test::write_text;

std::string decode(const std::vector<int>& tokens) {
  return decode_bytes(tokens);
}

// Documents of a text: fortune entries when some line is a lone "%", else blank-line separated
// paragraphs; each without surrounding newlines, blank ones dropped. An independent reading of
// the rule in dataset.h, kept simple rather than fast.
std::vector<std::string> documents_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  auto trimmed = [](std::string s) {
    return s.empty() || s.back() != '\r' ? s : s.substr(0, s.size() - 1);
  };
  const bool fortune = std::any_of(lines.begin(), lines.end(),
                                   [&](const std::string& l) { return trimmed(l) == "%"; });
  auto blank = [](const std::string& s) {
    return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
  };
  std::vector<std::string> docs;
  std::string current;
  auto flush = [&] {
    const size_t last = current.find_last_not_of("\r\n");
    current = last == std::string::npos ? "" : current.substr(0, last + 1);
    const size_t first = current.find_first_not_of("\r\n");
    if (!blank(current)) docs.push_back(current.substr(first));
    current.clear();
  };
  for (const std::string& line : lines) {
    if (fortune ? trimmed(line) == "%" : blank(line)) {
      flush();
    } else {
      current += line + "\n";
    }
  }
  flush();
  return docs;
}

// True when train[t..] and val[v..] are exactly docs[d..], each document in one of the two, in
// corpus order, separated only by newlines: the two streams partition the documents, the
// strongest form of "no document is in both". A document that is a prefix of another ("Do not
// underestimate print statements." and the same line with a second one) can be next in both
// streams; then both choices are tried. Adds the documents that went to val to *in_val and
// records in *furthest the last document placed, for the failure message.
bool partitions(const std::vector<std::string>& docs, const std::string& train,
                const std::string& val, size_t d, size_t t, size_t v, size_t* in_val,
                size_t* furthest) {
  auto skip_newlines = [](const std::string& s, size_t& i) {
    while (i < s.size() && (s[i] == '\n' || s[i] == '\r')) ++i;
  };
  size_t val_here = 0;
  for (; d < docs.size(); ++d) {
    *furthest = std::max(*furthest, d);
    skip_newlines(train, t);
    skip_newlines(val, v);
    const bool at_train = train.compare(t, docs[d].size(), docs[d]) == 0;
    const bool at_val = val.compare(v, docs[d].size(), docs[d]) == 0;
    if (!at_train && !at_val) return false;
    if (at_train && at_val) {
      size_t val_rest = 0;
      if (partitions(docs, train, val, d + 1, t + docs[d].size(), v, &val_rest, furthest)) {
        *in_val += val_here + val_rest;
        return true;
      }
    }
    (at_val ? v : t) += docs[d].size();
    val_here += at_val ? 1 : 0;
  }
  skip_newlines(train, t);
  skip_newlines(val, v);
  if (t != train.size() || v != val.size()) return false;
  *in_val += val_here;
  return true;
}

// Expects train and val to partition docs (see above); returns how many went to val.
size_t expect_partition(const std::vector<std::string>& docs, const std::string& train,
                        const std::string& val) {
  size_t in_val = 0, furthest = 0;
  EXPECT_TRUE(partitions(docs, train, val, 0, 0, 0, &in_val, &furthest))
      << "the streams stop matching the documents at document " << furthest << " of " << docs.size()
      << ": " << (furthest < docs.size() ? docs[furthest].substr(0, 80) : "");
  return in_val;
}

// n two-line paragraphs with unique markers, separated by assorted blank lines (empty, with
// spaces and tabs, several in a row).
std::string paragraphs(int n, int first = 0) {
  static const char* kSeparators[] = {"\n", "  \t\n", "\n\n\n"};
  std::string text;
  for (int i = first; i < first + n; ++i) {
    text += "[doc-" + std::to_string(10000 + i) + "] the first line of a paragraph\n";
    text += "and its second line, " + std::to_string(i * 7919 % 1000) + " bottles\n";
    text += kSeparators[i % 3];
  }
  return text;
}

std::set<std::string> markers_in(const std::string& text) {
  std::set<std::string> markers;
  for (size_t at = text.find("[doc-"); at != std::string::npos; at = text.find("[doc-", at + 1))
    markers.insert(text.substr(at, 11));
  return markers;
}

// The regular, non-index files of the fortunes directory in name order, as dataset.h states.
std::vector<std::string> fortune_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kFortunesDir)) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Raw shard bytes with the given header and `token_bytes` bytes of tokens (all 0x01).
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, size_t token_bytes) {
  std::string bytes(1024 + token_bytes, '\x01');
  std::fill(bytes.begin(), bytes.begin() + 1024, '\0');
  const int32_t header[3] = {magic, version, count};
  for (int f = 0; f < 3; ++f)
    for (int b = 0; b < 4; ++b)
      bytes[4 * f + b] = static_cast<char>((static_cast<uint32_t>(header[f]) >> (8 * b)) & 0xff);
  return bytes;
}

std::vector<int> iota_tokens(size_t n, int start = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

TEST(Tokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += text;  // and in a second position, so an off-by-one in the loop would show
  const std::vector<int> tokens = encode_bytes(text);
  ASSERT_EQ(tokens.size(), 512u);
  for (int i = 0; i < 512; ++i) EXPECT_EQ(tokens[i], i % 256);
  EXPECT_EQ(decode_bytes(tokens), text);
}

TEST(Tokenizer, DecodesSpecialIdsAsReplacementCharacter) {
  const std::vector<int> tokens = {'a', 256, -1, 'b'};
  EXPECT_EQ(decode_bytes(tokens),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
  EXPECT_TRUE(decode_bytes({}).empty());
}

// ---------------------------------------------------------------------------------------------
// Text sources

TEST(Dataset, FortunesLoadsWithTrainAndVal) {
  if (!std::filesystem::is_directory(kFortunesDir)) GTEST_SKIP() << "fortunes not installed";
  StatusOr<Dataset> ds = load_dataset("fortunes");
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_TRUE(ds->byte_level);
  EXPECT_GT(ds->train.size(), 1000000u);
  EXPECT_GT(ds->val.size(), 10000u);
  EXPECT_GE(ds->max_token, 0);
  EXPECT_LT(ds->max_token, kByteVocab);
  EXPECT_EQ(ds->description.rfind("fortunes: ", 0), 0u) << ds->description;
  EXPECT_NE(ds->description.find("files"), std::string::npos) << ds->description;
  // The split is a fixed function of a fixed corpus, so this bound cannot flake: with ~15,000
  // entries, 5% of documents lands within a fraction of a percent of 5% of the tokens; 2..10%
  // only catches a broken threshold (0.5% or 50%).
  const double share =
      static_cast<double>(ds->val.size()) / static_cast<double>(ds->train.size() + ds->val.size());
  EXPECT_GT(share, 0.02);
  EXPECT_LT(share, 0.10);
}

TEST(Dataset, FortunesSplitIsDeterministicAndPartitionsEntries) {
  if (!std::filesystem::is_directory(kFortunesDir)) GTEST_SKIP() << "fortunes not installed";
  StatusOr<Dataset> a = load_dataset("fortunes");
  StatusOr<Dataset> b = load_dataset("fortunes");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train, b->train);
  EXPECT_EQ(a->val, b->val);
  EXPECT_EQ(a->description, b->description);

  std::vector<std::string> docs;
  for (const std::string& file : fortune_files()) {
    for (std::string& d : documents_of(test::read_text(file))) docs.push_back(std::move(d));
  }
  ASSERT_GT(docs.size(), 10000u);
  const std::string train = decode(a->train), val = decode(a->val);
  EXPECT_EQ(train.find("\n%\n"), std::string::npos) << "a separator leaked into the text";
  const size_t in_val = expect_partition(docs, train, val);
  EXPECT_GT(in_val, 0u);
}

TEST(Dataset, TextFileSplitsIntoParagraphs) {
  TempDir dir;
  const std::string path = dir.file("corpus.txt");
  write_text(path, paragraphs(300));
  StatusOr<Dataset> ds = load_dataset(path, 0.2);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_TRUE(ds->byte_level);
  const std::string train = decode(ds->train), val = decode(ds->val);
  const std::vector<std::string> docs = documents_of(paragraphs(300));
  ASSERT_EQ(docs.size(), 300u);
  // Each paragraph's two lines stay together, so a paragraph is a document.
  const size_t in_val = expect_partition(docs, train, val);
  // 300 documents at 20%: mean 60, sd sqrt(300 * 0.2 * 0.8) = 6.9; the hash is fixed so this
  // is deterministic, and 5 sd either side is a bound a working hash cannot miss.
  EXPECT_NEAR(static_cast<double>(in_val), 60.0, 5 * 6.93);
  EXPECT_NE(ds->description.find("1 file,"), std::string::npos) << ds->description;
  EXPECT_NE(ds->description.find("300 documents"), std::string::npos) << ds->description;
}

TEST(Dataset, FortuneFormatKeepsBlankLinesInsideEntries) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "[doc-" + std::to_string(10000 + i) + "] opens the entry\n\n\tand after a blank line, ";
    text += "it closes <" + std::to_string(i) + ">\n%\n";
  }
  write_text(dir.file("quotes"), text);
  StatusOr<Dataset> ds = load_dataset(dir.file("quotes"), 0.3);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  const std::vector<std::string> docs = documents_of(text);
  ASSERT_EQ(docs.size(), 200u);
  EXPECT_GT(expect_partition(docs, decode(ds->train), decode(ds->val)), 0u);
}

TEST(Dataset, DirectoryReadsRegularFilesInNameOrder) {
  TempDir dir;
  const std::string a = paragraphs(100, 0), b = paragraphs(100, 100);
  write_text(dir.file("b.txt"), b);
  write_text(dir.file("a.txt"), a);
  // None of these may be read: a symlink (fortunes' *.u8 duplicates), an index, a hidden file,
  // a subdirectory.
  ASSERT_EQ(::symlink(dir.file("a.txt").c_str(), dir.file("c-link.txt").c_str()), 0);
  write_text(dir.file("a.dat"), "[doc-99990] index bytes\n");
  write_text(dir.file(".hidden"), "[doc-99991] editor backup\n");
  std::filesystem::create_directory(dir.file("sub"));
  write_text(dir.file("sub/x.txt"), "[doc-99992] nested\n");

  StatusOr<Dataset> ds = load_dataset(dir.path(), 0.25);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  std::vector<std::string> docs = documents_of(a);
  for (std::string& d : documents_of(b)) docs.push_back(std::move(d));
  // The partition check also rules out the symlink: a.txt's documents twice would not match.
  expect_partition(docs, decode(ds->train), decode(ds->val));
  EXPECT_NE(ds->description.find("2 files"), std::string::npos) << ds->description;
}

TEST(Dataset, SplitDependsOnContentNotFiles) {
  TempDir one, two;
  write_text(one.file("all.txt"), paragraphs(200));
  // The same paragraphs spread over three files in a different order.
  write_text(two.file("a"), paragraphs(50, 150));
  write_text(two.file("b"), paragraphs(100, 0));
  write_text(two.file("c"), paragraphs(50, 100));
  StatusOr<Dataset> x = load_dataset(one.path(), 0.1);
  StatusOr<Dataset> y = load_dataset(two.path(), 0.1);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(markers_in(decode(x->val)), markers_in(decode(y->val)));
  EXPECT_EQ(markers_in(decode(x->train)), markers_in(decode(y->train)));
  EXPECT_EQ(x->val.size(), y->val.size());
}

TEST(Dataset, MissingPathIsNotFound) {
  const std::string path = "/nonexistent/cann-data-test/corpus.txt";
  StatusOr<Dataset> ds = load_dataset(path);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ds.status().exit_code(), 2);
  EXPECT_NE(ds.status().message().find(path + ": no such file or directory"), std::string::npos)
      << ds.status().message();
  EXPECT_NE(ds.status().message().find("hint:"), std::string::npos);
}

TEST(Dataset, EmptyCorpusIsInvalidArgument) {
  TempDir dir;
  write_text(dir.file("empty.txt"), "");
  write_text(dir.file("blank.txt"), "\n  \n\t\n");
  for (const std::string& source : {dir.file("empty.txt"), dir.file("blank.txt"), dir.path()}) {
    StatusOr<Dataset> ds = load_dataset(source);
    ASSERT_FALSE(ds.ok()) << source;
    EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ds.status().message().find(source), std::string::npos) << ds.status().message();
    EXPECT_NE(ds.status().message().find("hint:"), std::string::npos);
  }
  TempDir only_index;
  write_text(only_index.file("x.dat"), "index");
  StatusOr<Dataset> ds = load_dataset(only_index.path());
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
}

TEST(Dataset, OneDocumentLeavesAnEmptySideAndSaysSo) {
  TempDir dir;
  write_text(dir.file("poem.txt"), "a single paragraph\nof two lines\n");
  // Whichever side the one document hashes to, the other side is empty.
  StatusOr<Dataset> ds = load_dataset(dir.file("poem.txt"), 0.05);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("split is empty"), std::string::npos)
      << ds.status().message();
  EXPECT_NE(ds.status().message().find("hint:"), std::string::npos);
  StatusOr<Dataset> bad = load_dataset(dir.file("poem.txt"), 1.5);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// llm.c shards

TEST(Shard, RoundTrip) {
  TempDir dir;
  const std::string path = dir.file("tokens.bin");
  std::vector<int> tokens = {0, 1, 255, 256, 50256, 65535, 12345};
  for (int i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % 65536);
  ASSERT_TRUE(write_llmc_shard(path, tokens).ok());
  const std::string bytes = test::read_text(path);
  ASSERT_EQ(bytes.size(), 1024 + 2 * tokens.size());
  // Little-endian header: 20240520 = 0x0134D888.
  EXPECT_EQ(bytes.substr(0, 4), std::string("\x88\xD8\x34\x01", 4));
  EXPECT_EQ(bytes.substr(4, 4), std::string("\x01\x00\x00\x00", 4));
  StatusOr<std::vector<int>> back = read_llmc_shard(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, tokens);

  ASSERT_TRUE(write_llmc_shard(path, {}).ok());
  back = read_llmc_shard(path);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->empty());
}

TEST(Shard, WriteRejectsTokensOutsideUint16) {
  TempDir dir;
  for (int bad : {-1, 65536}) {
    Status s = write_llmc_shard(dir.file("x.bin"), {1, 2, bad});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("position 2"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

struct BadShard {
  const char* name;
  std::string bytes;
  const char* says;
};

TEST(Shard, MalformedFilesAreDataLossNamingTheFile) {
  const std::vector<BadShard> cases = {
      {"bad_magic", shard_bytes(20240521, 1, 10, 20), "bad magic 20240521"},
      {"wrong_version", shard_bytes(20240520, 2, 10, 20), "unsupported shard version 2"},
      {"truncated_header", shard_bytes(20240520, 1, 10, 20).substr(0, 100), "truncated header"},
      {"truncated_tokens", shard_bytes(20240520, 1, 10, 19),
       "header says 10 tokens (1,044 bytes with the header) but file has 1,043 bytes"},
      {"extra_bytes", shard_bytes(20240520, 1, 10, 22), "but file has 1,046 bytes"},
      {"negative_count", shard_bytes(20240520, 1, -3, 0), "header says -3 tokens"},
  };
  TempDir dir;
  for (const BadShard& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(std::string(c.name) + "_train.bin");
    write_text(path, c.bytes);
    StatusOr<std::vector<int>> tokens = read_llmc_shard(path);
    ASSERT_FALSE(tokens.ok());
    EXPECT_EQ(tokens.status().code(), StatusCode::kDataLoss);
    const std::string& m = tokens.status().message();
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(c.says), std::string::npos) << m;
    EXPECT_NE(m.find("hint:"), std::string::npos) << m;
    // load_dataset passes the same error through.
    StatusOr<Dataset> ds = load_dataset(path);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(ds.status().message(), m);
  }
}

TEST(Shard, DirectoryOfShardsSplitsByName) {
  TempDir dir;
  const std::vector<int> t1 = iota_tokens(500, 0), t2 = iota_tokens(300, 50000);
  const std::vector<int> v0 = {50256, 7, 8, 9};
  ASSERT_TRUE(write_llmc_shard(dir.file("tiny_train_000002.bin"), t2).ok());
  ASSERT_TRUE(write_llmc_shard(dir.file("tiny_train_000001.bin"), t1).ok());
  ASSERT_TRUE(write_llmc_shard(dir.file("tiny_val_000000.bin"), v0).ok());
  write_text(dir.file("README.md"), "not a shard, not read\n");
  StatusOr<Dataset> ds = load_dataset(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  std::vector<int> train = t1;
  train.insert(train.end(), t2.begin(), t2.end());
  EXPECT_EQ(ds->train, train);
  EXPECT_EQ(ds->val, v0);
  EXPECT_FALSE(ds->byte_level);
  // Ids beyond a byte vocabulary (GPT-2's 50256 here) are what max_token exists to report.
  EXPECT_EQ(ds->max_token, 50299);
  EXPECT_NE(ds->description.find("3 shards"), std::string::npos) << ds->description;
}

TEST(Shard, MaxTokenReportsIdsBeyondTheVocab) {
  TempDir dir;
  ASSERT_TRUE(write_llmc_shard(dir.file("a_train.bin"), {3, 65535, 4}).ok());
  ASSERT_TRUE(write_llmc_shard(dir.file("a_val.bin"), {1, 2}).ok());
  StatusOr<Dataset> ds = load_dataset(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ(ds->max_token, 65535);
}

TEST(Shard, SingleShardHoldsOutItsTail) {
  TempDir dir;
  const std::string path = dir.file("only_train.bin");
  const std::vector<int> tokens = iota_tokens(1000, 1);
  ASSERT_TRUE(write_llmc_shard(path, tokens).ok());
  StatusOr<Dataset> ds = load_dataset(path, 0.1);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ(ds->train, std::vector<int>(tokens.begin(), tokens.begin() + 900));
  EXPECT_EQ(ds->val, std::vector<int>(tokens.begin() + 900, tokens.end()));
  EXPECT_EQ(ds->max_token, 1000);
}

TEST(Shard, OnlyValidationShardsIsInvalidArgument) {
  TempDir dir;
  ASSERT_TRUE(write_llmc_shard(dir.file("x_val.bin"), {1, 2, 3}).ok());
  StatusOr<Dataset> ds = load_dataset(dir.file("x_val.bin"));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("no training tokens"), std::string::npos);
}

}  // namespace
}  // namespace cann::data
