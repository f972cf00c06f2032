// Tests of the checkpoint files (src/ckpt): exact round trips, the on-disk layout, retention,
// atomic replacement, and every way a checkpoint can go bad on disk (flipped byte, truncation,
// broken manifest, wrong magic or version, missing files, a full disk), each of which must come
// back as the right Status and never as a crash or a silently wrong load.
#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "ckpt/snapshot_writer.h"
#include "core/fs.h"
#include "core/word_sum.h"
#include "test_util.h"

namespace cann::ckpt {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Deterministic bytes that differ per seed, so a section swapped with another is caught.
std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  Rng rng(seed);
  for (auto& c : v) c = static_cast<char>(rng.next_u64());
  return v;
}

struct Payload {
  std::vector<std::pair<std::string, std::vector<char>>> sections;
  CheckpointWrite to_write(int64_t step, std::string meta = "{}") const {
    CheckpointWrite w;
    w.step = step;
    w.meta_json = std::move(meta);
    for (const auto& [name, data] : sections)
      w.sections.push_back({name, data.data(), data.size()});
    return w;
  }
};

// params: 100 bytes, adam_m: 10 bytes (the worked example of the layout comment), rng: empty.
Payload small_payload(uint32_t seed = 1) {
  return {{{"params", pattern(100, seed)}, {"adam_m", pattern(10, seed + 1)}, {"rng", {}}}};
}

std::string write_ok(const std::string& dir, int64_t step, int keep_last = 0, uint32_t seed = 1) {
  StatusOr<std::string> path = write_checkpoint(dir, small_payload(seed).to_write(step), keep_last);
  EXPECT_TRUE(path.ok()) << path.status().message();
  return path.ok() ? *path : std::string();
}

std::vector<std::string> listed(const std::string& dir) {
  StatusOr<std::vector<std::string>> l = list_checkpoints(dir);
  EXPECT_TRUE(l.ok()) << l.status().message();
  return l.ok() ? *l : std::vector<std::string>();
}

// Names in dir that start with '.', i.e. temporaries or set-aside checkpoints.
std::vector<std::string> hidden_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name[0] == '.') out.push_back(name);
  }
  return out;
}

void patch_file(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& fragments) {
  EXPECT_EQ(s.code(), code) << s.message();
  for (const auto& f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

TEST(CheckpointTest, RoundTripKeepsSectionsAndMetaExactly) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");  // created by write_checkpoint
  Payload p = small_payload(7);
  p.sections.push_back({"adam_v", pattern(4097, 99)});
  const std::string meta =
      R"({ "zeta": 1, "model": {"name": "gpt", "layers": [1, 2]}, "lr": 0.5 })";
  StatusOr<std::string> path = write_checkpoint(dir, p.to_write(42, meta), 3);
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, dir + "/step-00000042");
  EXPECT_TRUE(is_directory(*path));
  EXPECT_TRUE(hidden_entries(dir).empty());

  StatusOr<LoadedCheckpoint> loaded = read_checkpoint(*path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->path, *path);
  EXPECT_EQ(loaded->step, 42);
  // Same value and key order, re-serialized compactly.
  EXPECT_EQ(loaded->meta_json, R"({"zeta":1,"model":{"name":"gpt","layers":[1,2]},"lr":0.5})");
  ASSERT_EQ(loaded->sections.size(), p.sections.size());
  for (size_t i = 0; i < p.sections.size(); ++i) {
    EXPECT_EQ(loaded->sections[i].name, p.sections[i].first);
    EXPECT_EQ(loaded->sections[i].data, p.sections[i].second) << p.sections[i].first;
  }
  ASSERT_NE(loaded->find("adam_v"), nullptr);
  EXPECT_EQ(loaded->find("adam_v")->data.size(), 4097u);
  EXPECT_EQ(loaded->find("missing"), nullptr);
}

TEST(CheckpointTest, LayoutHasHeaderAndAlignedSections) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 3);
  const std::string data = test::read_text(path + "/data.bin");
  ASSERT_GE(data.size(), 16u);
  EXPECT_EQ(data.substr(0, 8), "CANNCKPT");
  EXPECT_EQ(data.substr(8, 4), std::string("\x01\x00\x00\x00", 4));   // version 1, LE
  EXPECT_EQ(data.substr(12, 4), std::string("\x40\x00\x00\x00", 4));  // header 64 bytes, LE

  const auto manifest = nlohmann::json::parse(test::read_text(path + "/manifest.json"));
  EXPECT_EQ(manifest["format"], "cann-train-checkpoint");
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(manifest["step"], 3);
  EXPECT_EQ(manifest["data_file"], "data.bin");
  EXPECT_EQ(manifest["data_bytes"].get<size_t>(), data.size());
  // 100 bytes at 64; 10 bytes at align64(164) = 192; the empty section at align64(202) = 256.
  const std::vector<uint64_t> expected_offsets = {64, 192, 256};
  ASSERT_EQ(manifest["sections"].size(), 3u);
  uint64_t end = 64;
  for (size_t i = 0; i < 3; ++i) {
    const auto& s = manifest["sections"][i];
    const uint64_t offset = s["offset"].get<uint64_t>();
    EXPECT_EQ(offset % 64, 0u);
    EXPECT_GE(offset, end);
    EXPECT_EQ(offset, expected_offsets[i]);
    end = offset + s["bytes"].get<uint64_t>();
  }
  // The empty section still starts aligned, so the file ends at 256, not at 202.
  EXPECT_EQ(data.size(), 256u);
}

TEST(CheckpointTest, KeepLastPrunesOldest) {
  TempDir tmp;
  for (int step = 1; step <= 5; ++step) write_ok(tmp.path(), step * 100, 2);
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000500"), tmp.file("step-00000400")}));
  EXPECT_TRUE(hidden_entries(tmp.path()).empty());

  TempDir all;
  for (int step = 1; step <= 5; ++step) write_ok(all.path(), step, 0);
  EXPECT_EQ(listed(all.path()).size(), 5u);
}

// In-memory snapshots: each reads back exactly through read_checkpoint, the newest two stay
// listed, and from the third on every snapshot goes into the files of the oldest (two
// directories in turn, whatever the section sizes do: no third copy of the state in memory).
TEST(SnapshotWriterTest, SnapshotsReadBackExactlyAndReuseTwoDirectories) {
  TempDir tmp;
  const size_t sizes[] = {5000, 5000, 5000, 9000, 300, 300, 7000};
  std::set<ino_t> inodes;
  {
    SnapshotWriter writer(tmp.path(), 2);
    for (int step = 1; step <= 7; ++step) {
      const Payload p{{{"params", pattern(sizes[step - 1], step)}, {"adam_m", pattern(64, 99)}}};
      const std::string meta = "{\"step_log\":\"line " + std::to_string(step) + "\",\"n\":[1,2]}";
      StatusOr<std::string> path = writer.write(p.to_write(step, meta));
      ASSERT_TRUE(path.ok()) << path.status().message();
      EXPECT_EQ(*path, tmp.file("step-0000000" + std::to_string(step)));
      struct stat st {};
      ASSERT_EQ(::stat((*path + "/data.bin").c_str(), &st), 0);
      inodes.insert(st.st_ino);
      StatusOr<LoadedCheckpoint> loaded = read_checkpoint(*path);
      ASSERT_TRUE(loaded.ok()) << loaded.status().message();
      EXPECT_EQ(loaded->step, step);
      EXPECT_EQ(loaded->meta_json, meta);
      ASSERT_EQ(loaded->sections.size(), 2u);
      EXPECT_EQ(loaded->find("params")->data, p.sections[0].second) << "step " << step;
      EXPECT_EQ(loaded->find("adam_m")->data, p.sections[1].second) << "step " << step;
      EXPECT_LE(hidden_entries(tmp.path()).size(), 1u) << "step " << step;
    }
  }
  EXPECT_EQ(inodes.size(), 2u);
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000007"), tmp.file("step-00000006")}));
  const nlohmann::json manifest =
      nlohmann::json::parse(test::read_text(tmp.file("step-00000007/manifest.json")));
  EXPECT_EQ(manifest.at("memory_snapshot"), true);
  EXPECT_FALSE(manifest.at("sections").at(0).contains("crc32c"));
  EXPECT_EQ(manifest.at("sections").at(0).at("wsum64").get<std::string>().size(), 16u);
}

// State that lives in a snapshot: written where lend() put it, published by write() in place
// (with the word sums its writer took, or without), read back exactly; the next slot lent
// is never the one holding the newest snapshot, so that one stays published throughout.
TEST(SnapshotWriterTest, LentSlotsArePublishedInPlaceAndAlternate) {
  TempDir tmp;
  SnapshotWriter writer(tmp.path(), 2);
  const std::vector<uint64_t> bytes = {4000, 256};
  const char* live = nullptr;
  std::set<const char*> slots;
  for (int step = 1; step <= 5; ++step) {
    StatusOr<std::vector<char*>> at = writer.lend(bytes, live);
    ASSERT_TRUE(at.ok()) << at.status().message();
    ASSERT_EQ(at->size(), 2u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*at)[0]) % 64, 0u);
    if (live != nullptr) {
      EXPECT_NE((*at)[0], live) << "step " << step;
      // The newest snapshot is still listed while the next is written.
      EXPECT_EQ(listed(tmp.path()).front(), tmp.file("step-0000000" + std::to_string(step - 1)));
    }
    slots.insert((*at)[0]);
    const std::vector<char> p = pattern(4000, step), m = pattern(256, 50 + step);
    std::memcpy((*at)[0], p.data(), p.size());
    std::memcpy((*at)[1], m.data(), m.size());
    CheckpointWrite w;
    w.step = step;
    w.meta_json = "{}";
    w.sections = {{"params", (*at)[0], 4000}, {"adam_m", (*at)[1], 256}};
    if (step % 2 == 0) {  // the writer of the data summed it on the way
      w.sections[0].has_word_sum = true;
      w.sections[0].word_sum = word_sum(p.data(), p.size());
    }
    StatusOr<std::string> path = writer.write(w);
    ASSERT_TRUE(path.ok()) << path.status().message();
    StatusOr<LoadedCheckpoint> loaded = read_checkpoint(*path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    EXPECT_EQ(loaded->find("params")->data, p) << "step " << step;
    EXPECT_EQ(loaded->find("adam_m")->data, m) << "step " << step;
    live = (*at)[0];
  }
  EXPECT_EQ(slots.size(), 2u);
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000005"), tmp.file("step-00000004")}));

  // A sum that does not match what lies there is caught on reading, as damage is.
  StatusOr<std::vector<char*>> at = writer.lend(bytes, live);
  ASSERT_TRUE(at.ok()) << at.status().message();
  CheckpointWrite w;
  w.step = 6;
  w.meta_json = "{}";
  w.sections = {{"params", (*at)[0], 4000}, {"adam_m", (*at)[1], 256}};
  w.sections[0].has_word_sum = true;
  w.sections[0].word_sum = 12345;
  StatusOr<std::string> path = writer.write(w);
  ASSERT_TRUE(path.ok()) << path.status().message();
  expect_error(read_checkpoint(*path).status(), StatusCode::kDataLoss, {"params", "checksum"});
}

// A lent slot whose first section lies elsewhere (the parameters, which stay in the model's
// own buffer) and whose others lie in place is still the slot written: the section from
// elsewhere is copied into its place there, the others are not touched, and the next slot lent
// besides it is the other one.
TEST(SnapshotWriterTest, ALentSlotTakesTheSectionsThatLieElsewhere) {
  TempDir tmp;
  SnapshotWriter writer(tmp.path(), 2);
  const std::vector<uint64_t> bytes = {4000, 256};
  const char* published = nullptr;
  for (int step = 1; step <= 3; ++step) {
    StatusOr<std::vector<char*>> at = writer.lend(bytes, published);
    ASSERT_TRUE(at.ok()) << at.status().message();
    if (published != nullptr) EXPECT_NE((*at)[1], published) << "step " << step;
    const std::vector<char> p = pattern(4000, step), m = pattern(256, 70 + step);
    std::memcpy((*at)[1], m.data(), m.size());
    CheckpointWrite w;
    w.step = step;
    w.meta_json = "{}";
    w.sections = {{"params", p.data(), 4000}, {"adam_m", (*at)[1], 256}};
    StatusOr<std::string> path = writer.write(w);
    ASSERT_TRUE(path.ok()) << path.status().message();
    // Written into the lent slot: its params section now holds the copy.
    EXPECT_EQ(std::memcmp((*at)[0], p.data(), p.size()), 0) << "step " << step;
    StatusOr<LoadedCheckpoint> loaded = read_checkpoint(*path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    EXPECT_EQ(loaded->find("params")->data, p) << "step " << step;
    EXPECT_EQ(loaded->find("adam_m")->data, m) << "step " << step;
    published = (*at)[1];
  }
}

// A memory snapshot damaged in place (a stray write, a bad page) is DataLoss naming the
// section, caught by its word sum.
TEST(SnapshotWriterTest, ADamagedSnapshotIsDataLossNamingTheSection) {
  TempDir tmp;
  SnapshotWriter writer(tmp.path(), 2);
  StatusOr<std::string> path = writer.write(small_payload().to_write(1));
  ASSERT_TRUE(path.ok()) << path.status().message();
  patch_file(*path + "/data.bin", 64 + 37, "\x01");
  expect_error(read_checkpoint(*path).status(), StatusCode::kDataLoss,
               {"params", "checksum mismatch"});
}

// A snapshot of a step that is already there (a restored run doing the step again) replaces it.
TEST(SnapshotWriterTest, SameStepIsReplaced) {
  TempDir tmp;
  SnapshotWriter writer(tmp.path(), 2);
  ASSERT_TRUE(writer.write(small_payload(1).to_write(4)).ok());
  ASSERT_TRUE(writer.write(small_payload(2).to_write(5)).ok());
  StatusOr<std::string> again = writer.write(small_payload(3).to_write(5));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000005"), tmp.file("step-00000004")}));
  StatusOr<LoadedCheckpoint> loaded = read_checkpoint(*again);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->find("params")->data, small_payload(3).sections[0].second);
}

// The directory of a rank whose process was killed: its snapshots, a half-written spare and a
// temporary. A new writer keeps the published ones (they are what a restore loads), clears the
// rest, and retires the old ones as it writes.
TEST(SnapshotWriterTest, ANewWriterAdoptsADeadWritersDirectory) {
  TempDir tmp;
  {
    SnapshotWriter dead(tmp.path(), 2);
    for (int step = 1; step <= 3; ++step)
      ASSERT_TRUE(dead.write(small_payload(step).to_write(step)).ok());
  }
  ASSERT_EQ(::mkdir(tmp.file(".slot-7").c_str(), 0755), 0);
  test::write_text(tmp.file(".slot-7/data.bin"), "torn");
  ASSERT_EQ(::mkdir(tmp.file(".step-00000004.tmp-1").c_str(), 0755), 0);
  SnapshotWriter writer(tmp.path(), 2);
  StatusOr<std::string> path = writer.write(small_payload(9).to_write(4));
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000004"), tmp.file("step-00000003")}));
  EXPECT_LE(hidden_entries(tmp.path()).size(), 1u);
  StatusOr<LoadedCheckpoint> four = read_latest_checkpoint(tmp.path());
  ASSERT_TRUE(four.ok()) << four.status().message();
  EXPECT_EQ(four->find("params")->data, small_payload(9).sections[0].second);
  StatusOr<LoadedCheckpoint> three = read_checkpoint(tmp.file("step-00000003"));
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_EQ(three->find("params")->data, small_payload(3).sections[0].second);

  // Another process puts a snapshot in (a copy received from a peer): after rescan() the
  // writer counts it among the kept ones.
  ASSERT_TRUE(write_checkpoint(tmp.path(), small_payload(5).to_write(5), 0).ok());
  writer.rescan();
  ASSERT_TRUE(writer.write(small_payload(6).to_write(6)).ok());
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-00000006"), tmp.file("step-00000005")}));
}

// A CRC-32C may be left out by a memory snapshot only (which carries its word sum instead).
TEST(SnapshotWriterTest, ADiskManifestWithoutChecksumsIsDataLoss) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  nlohmann::json manifest = nlohmann::json::parse(test::read_text(path + "/manifest.json"));
  manifest["sections"][0].erase("crc32c");
  test::write_text(path + "/manifest.json", manifest.dump());
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss, {"crc32c", "manifest"});
}

TEST(SnapshotWriterTest, BadArgumentsWriteNothing) {
  TempDir tmp;
  SnapshotWriter writer(tmp.file("snap"), 2);
  expect_error(writer.write(small_payload().to_write(-1)).status(), StatusCode::kInvalidArgument,
               {"negative"});
  expect_error(writer.write(small_payload().to_write(1, "[1]")).status(),
               StatusCode::kInvalidArgument, {"JSON object"});
  Payload twice{{{"params", pattern(4, 1)}, {"params", pattern(4, 2)}}};
  expect_error(writer.write(twice.to_write(1)).status(), StatusCode::kInvalidArgument,
               {"repeated"});
  EXPECT_FALSE(fs::exists(tmp.file("snap/step-00000001")));
}

TEST(CheckpointTest, PruneNeverDeletesTheOneJustWritten) {
  TempDir tmp;
  write_ok(tmp.path(), 10, 2);
  write_ok(tmp.path(), 20, 2);
  const std::string older = write_ok(tmp.path(), 5, 2);
  EXPECT_EQ(listed(tmp.path()), (std::vector<std::string>{tmp.file("step-00000020"),
                                                          tmp.file("step-00000010"), older}));
}

TEST(CheckpointTest, RewritingSameStepReplacesIt) {
  TempDir tmp;
  write_ok(tmp.path(), 7, 0, /*seed=*/1);
  const std::string path = write_ok(tmp.path(), 7, 0, /*seed=*/2);
  EXPECT_EQ(listed(tmp.path()), std::vector<std::string>{path});
  EXPECT_TRUE(hidden_entries(tmp.path()).empty());
  StatusOr<LoadedCheckpoint> loaded = read_checkpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->find("params")->data, small_payload(2).sections[0].second);
}

TEST(CheckpointTest, ListOrdersByStepNumberAndSkipsOtherNames) {
  TempDir tmp;
  write_ok(tmp.path(), 9);
  write_ok(tmp.path(), 10);
  write_ok(tmp.path(), 123456789);  // wider than the padding
  // Unpadded names sort "step-9" after "step-10" as text; the list must order by number.
  fs::rename(tmp.file("step-00000009"), tmp.file("step-9"));
  fs::rename(tmp.file("step-00000010"), tmp.file("step-10"));
  fs::create_directory(tmp.file(".step-00000011.tmp-4242"));
  fs::create_directory(tmp.file("step-12.bak"));
  fs::create_directory(tmp.file("step-"));
  fs::create_directory(tmp.file("step-x1"));
  test::write_text(tmp.file("step-00000013"), "a file, not a checkpoint");
  EXPECT_EQ(listed(tmp.path()),
            (std::vector<std::string>{tmp.file("step-123456789"), tmp.file("step-10"),
                                      tmp.file("step-9")}));
  StatusOr<LoadedCheckpoint> loaded = read_checkpoint(tmp.file("step-9"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->step, 9);

  expect_error(list_checkpoints(tmp.file("absent")).status(), StatusCode::kNotFound, {"absent"});
}

TEST(CheckpointTest, CorruptByteIsDataLossNamingSection) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  patch_file(path + "/data.bin", 192 + 3, "\xff\x00");  // inside adam_m
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss,
               {"\"adam_m\"", path + "/data.bin", "CRC-32C", "corrupt", "older"});
}

TEST(CheckpointTest, TruncatedDataIsDataLoss) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  fs::resize_file(path + "/data.bin", 255);
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss,
               {path + "/data.bin is 255 bytes, manifest says 256"});
  fs::resize_file(path + "/data.bin", 5);  // not even a header
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss, {"is 5 bytes"});
}

TEST(CheckpointTest, MalformedManifestIsDataLoss) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  const std::string manifest = path + "/manifest.json";
  const std::string good = test::read_text(manifest);

  test::write_text(manifest, good.substr(0, good.size() / 2));
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss, {manifest, "malformed JSON"});

  // Well-formed JSON with a mistyped field, a wrong format name, a section out of bounds.
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    test::write_text(manifest, text);
    return read_checkpoint(path).status();
  };
  expect_error(edited("\"data_bytes\": 256", "\"data_bytes\": \"256\""), StatusCode::kDataLoss,
               {"data_bytes"});
  expect_error(edited("cann-train-checkpoint", "something-else"), StatusCode::kDataLoss,
               {"something-else"});
  expect_error(edited("\"offset\": 192", "\"offset\": 18446744073709551552"), StatusCode::kDataLoss,
               {"adam_m", "does not fit"});
  expect_error(edited("\"data_file\": \"data.bin\"", "\"data_file\": \"../x\""),
               StatusCode::kDataLoss, {"data_file"});
  test::write_text(manifest, "[1, 2]");
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss, {"not a JSON object"});
}

TEST(CheckpointTest, BadMagicIsDataLoss) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  patch_file(path + "/data.bin", 0, "NOTCKPT!");
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss,
               {path + "/data.bin", "bad magic"});
}

TEST(CheckpointTest, UnsupportedVersionIsDataLoss) {
  TempDir tmp;
  const std::string path = write_ok(tmp.path(), 1);
  patch_file(path + "/data.bin", 8, std::string("\x07\x00\x00\x00", 4));
  expect_error(read_checkpoint(path).status(), StatusCode::kDataLoss,
               {"data.bin", "version 7", "reads version 1"});

  const std::string path2 = write_ok(tmp.path(), 2);
  const std::string manifest = path2 + "/manifest.json";
  std::string text = test::read_text(manifest);
  const size_t at = text.find("\"version\": 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"version\": 2");
  test::write_text(manifest, text);
  expect_error(read_checkpoint(path2).status(), StatusCode::kDataLoss,
               {manifest, "version 2", "reads version 1"});
}

TEST(CheckpointTest, MissingFilesAreNotFound) {
  TempDir tmp;
  expect_error(read_checkpoint(tmp.file("step-00000001")).status(), StatusCode::kNotFound,
               {"step-00000001"});
  const std::string a = write_ok(tmp.path(), 1);
  fs::remove(a + "/data.bin");
  expect_error(read_checkpoint(a).status(), StatusCode::kNotFound, {a + "/data.bin"});
  const std::string b = write_ok(tmp.path(), 2);
  fs::remove(b + "/manifest.json");
  expect_error(read_checkpoint(b).status(), StatusCode::kNotFound, {b + "/manifest.json"});
}

TEST(CheckpointTest, ReadLatestFallsBackToPreviousValid) {
  TempDir tmp;
  const std::string s1 = write_ok(tmp.path(), 1, 0, 11);
  const std::string s2 = write_ok(tmp.path(), 2, 0, 12);
  const std::string s3 = write_ok(tmp.path(), 3, 0, 13);
  patch_file(s3 + "/data.bin", 70, "\x5a");

  testing::internal::CaptureStderr();
  StatusOr<LoadedCheckpoint> latest = read_latest_checkpoint(tmp.path());
  const std::string warnings = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  EXPECT_EQ(latest->step, 2);
  EXPECT_EQ(latest->path, s2);
  EXPECT_EQ(latest->find("params")->data, small_payload(12).sections[0].second);
  EXPECT_NE(warnings.find(s3), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("CRC-32C"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("previous"), std::string::npos) << warnings;

  fs::resize_file(s2 + "/data.bin", 10);
  test::write_text(s1 + "/manifest.json", "");
  testing::internal::CaptureStderr();
  StatusOr<LoadedCheckpoint> none = read_latest_checkpoint(tmp.path());
  testing::internal::GetCapturedStderr();
  // Checkpoints exist but none verifies: DataLoss, so a resume does not silently start over.
  expect_error(none.status(), StatusCode::kDataLoss, {"no valid checkpoint in " + tmp.path()});

  TempDir empty;
  expect_error(read_latest_checkpoint(empty.path()).status(), StatusCode::kNotFound,
               {"no valid checkpoint"});
  expect_error(read_latest_checkpoint(empty.file("absent")).status(), StatusCode::kNotFound,
               {"no valid checkpoint"});
}

TEST(CheckpointTest, LeftoverTemporaryIsIgnored) {
  TempDir tmp;
  const std::string s1 = write_ok(tmp.path(), 1);
  // A crashed writer of step 2 in another process left a half-written temporary.
  const std::string other = tmp.file(".step-00000002.tmp-99999999");
  fs::create_directory(other);
  test::write_text(other + "/data.bin", "CANNCK");
  EXPECT_EQ(listed(tmp.path()), std::vector<std::string>{s1});
  StatusOr<LoadedCheckpoint> latest = read_latest_checkpoint(tmp.path());
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  EXPECT_EQ(latest->step, 1);

  // This process's own stale temporary for the step is cleared and the write goes through.
  const std::string own = tmp.file(".step-00000002.tmp-" + std::to_string(::getpid()));
  fs::create_directory(own);
  test::write_text(own + "/manifest.json", "{");
  const std::string s2 = write_ok(tmp.path(), 2);
  EXPECT_FALSE(fs::exists(own));
  EXPECT_TRUE(fs::exists(other));  // another process's file is not ours to delete
  EXPECT_TRUE(read_checkpoint(s2).ok());
}

TEST(CheckpointTest, InvalidArgumentsWriteNothing) {
  TempDir tmp;
  const Payload p = small_payload();
  for (const std::string meta : {"not json", "[1, 2]", "", "{\"a\": }", "42"}) {
    expect_error(write_checkpoint(tmp.path(), p.to_write(1, meta), 0).status(),
                 StatusCode::kInvalidArgument, {"metadata", "hint:"});
  }
  CheckpointWrite dup = p.to_write(1);
  dup.sections[1].name = "params";
  expect_error(write_checkpoint(tmp.path(), dup, 0).status(), StatusCode::kInvalidArgument,
               {"\"params\""});
  expect_error(write_checkpoint(tmp.path(), p.to_write(-1), 0).status(),
               StatusCode::kInvalidArgument, {"-1"});
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(CheckpointTest, UnwritableDirectoryIsIoError) {
  TempDir tmp;
  test::write_text(tmp.file("blocker"), "x");
  expect_error(write_checkpoint(tmp.file("blocker/ckpt"), small_payload().to_write(1), 0).status(),
               StatusCode::kIoError, {"blocker"});
}

// A tmpfs of 256 KiB stands in for a full disk: the real ENOSPC path of the kernel, no mocks.
class CheckpointDiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_point_ = tmp_.file("small");
    ASSERT_EQ(::mkdir(mount_point_.c_str(), 0755), 0);
    if (::mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, "size=256k") != 0) {
      GTEST_SKIP() << "cannot mount a 256 KiB tmpfs (" << std::strerror(errno)
                   << "); the disk-full test needs root or CAP_SYS_ADMIN";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(mount_point_.c_str(), MNT_DETACH), 0) << mount_point_;
    }
  }

  TempDir tmp_;
  std::string mount_point_;
  bool mounted_ = false;
};

TEST_F(CheckpointDiskFullTest, FullDiskIsIoErrorAndKeepsPreviousCheckpoint) {
  const std::string dir = mount_point_ + "/ckpt";
  const std::string s1 = write_ok(dir, 1, 0, 5);
  Payload big;
  big.sections.push_back({"params", pattern(1 << 20, 6)});

  // A new step that does not fit.
  StatusOr<std::string> s2 = write_checkpoint(dir, big.to_write(2), 0);
  expect_error(s2.status(), StatusCode::kIoError, {"disk full", dir, "step 2"});
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  EXPECT_TRUE(hidden_entries(dir).empty());

  // Replacing step 1 with one that does not fit must leave the old step 1 intact.
  expect_error(write_checkpoint(dir, big.to_write(1), 0).status(), StatusCode::kIoError,
               {"disk full"});
  EXPECT_TRUE(hidden_entries(dir).empty());
  EXPECT_EQ(listed(dir), std::vector<std::string>{s1});
  StatusOr<LoadedCheckpoint> loaded = read_latest_checkpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->step, 1);
  EXPECT_EQ(loaded->find("params")->data, small_payload(5).sections[0].second);

  // The space was given back: a small checkpoint still fits.
  EXPECT_FALSE(write_ok(dir, 3, 0, 7).empty());
}

// A memory file system that is full: the snapshot that does not fit is an error (allocated
// before it is mapped, so never a SIGBUS), and the one before it stays readable.
TEST_F(CheckpointDiskFullTest, FullMemoryIsAnErrorForASnapshotAndKeepsThePreviousOne) {
  const std::string dir = mount_point_ + "/snap";
  SnapshotWriter writer(dir, 2);
  ASSERT_TRUE(writer.write(small_payload(5).to_write(1)).ok());
  Payload big;
  big.sections.push_back({"params", pattern(1 << 20, 6)});
  expect_error(writer.write(big.to_write(2)).status(), StatusCode::kIoError,
               {"memory file system full", "step 2"});
  EXPECT_EQ(listed(dir), std::vector<std::string>{dir + "/step-00000001"});
  StatusOr<LoadedCheckpoint> loaded = read_checkpoint(dir + "/step-00000001");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->find("params")->data, small_payload(5).sections[0].second);
  // Space comes back with smaller snapshots.
  ASSERT_TRUE(writer.write(small_payload(7).to_write(3)).ok());
}

// Gradient dumps (`run --dump-grads`) are safetensors files: every malformed header or
// truncation is an error naming the file, never a read past the buffer (this suite also runs
// under ASan).
TEST(SafetensorsTest, MalformedFilesAreErrorsNotCrashes) {
  SafeTensors st;
  st.tensors = {{"a", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {0}, {}}};
  auto bytes = encode_safetensors(st);
  ASSERT_TRUE(bytes.ok());
  auto back = decode_safetensors(*bytes, "g.safetensors");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tensors[0].data, st.tensors[0].data);
  EXPECT_TRUE(back->tensors[1].data.empty());
  // Every truncation fails.
  for (size_t n = 0; n + 1 < bytes->size(); n += 3)
    EXPECT_FALSE(decode_safetensors(bytes->substr(0, n), "g.safetensors").ok()) << n;
  auto with_header = [](const std::string& json, size_t data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    return out + json + std::string(data, '\0');
  };
  const std::vector<std::string> bad = {
      "[1,2]",
      R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2]}})",
      R"({"__metadata__":[1]})",
      "{not json",
  };
  for (const std::string& json : bad) {
    auto r = decode_safetensors(with_header(json, 8), "g.safetensors");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.status().message().find("g.safetensors: not a safetensors file"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
  EXPECT_FALSE(decode_safetensors(std::string(16, '\xff'), "g.safetensors").ok());
  // A shape that does not match its data is refused when writing.
  st.tensors[0].shape = {4};
  EXPECT_FALSE(encode_safetensors(st).ok());
}

}  // namespace
}  // namespace cann::ckpt
