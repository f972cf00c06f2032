// TensorBoard event files, checked by a reader written from the formats' definitions rather
// than from the writer (tensorboard_reader.h). When Debian's python3 has the tensorboard
// package, the files are also loaded by TensorBoard's own reader.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "monitor/tensorboard.h"
#include "tensorboard_reader.h"
#include "test_util.h"

namespace cann::monitor {
namespace {

using namespace test;  // the independent reader (tensorboard_reader.h)

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<TensorBoardWriter> open_writer(const std::string& logdir) {
  auto writer = TensorBoardWriter::open(logdir);
  EXPECT_TRUE(writer.ok()) << writer.status().message();
  return writer.ok() ? std::move(writer).value() : nullptr;
}

struct Scalar {
  std::string tag;
  double value;
  int64_t step;
  double wall_time;
};

// Steps 0 (left out on the wire), one byte, several bytes and negative (ten varint bytes);
// a 200-byte tag needs a two-byte length; a UTF-8 tag; a value that is not exact in float.
std::vector<Scalar> sample_scalars() {
  return {
      {"train/loss", 3.25, 0, 1796230000.5},
      {"train/loss", 2.75, 1, 1796230001.25},
      {"train/lr", 1e-4, 127, 1796230002.0},
      {"train/lr", 0.1, 128, 1796230003.0},
      {"comm/exposed_ratio", 0.0, int64_t{1} << 40, 1796230004.0},
      {std::string(200, 'x'), -7.5, 300, 1796230005.0},
      {"验证/损失", 1.0e6, -1, 1796230006.0},
  };
}

void expect_scalars(const DecodedFile& file, const std::vector<Scalar>& scalars) {
  ASSERT_TRUE(file.error.empty()) << file.error;
  ASSERT_EQ(file.events.size(), scalars.size() + 1);
  for (size_t i = 0; i < scalars.size(); ++i) {
    const DecodedEvent& e = file.events[i + 1];
    SCOPED_TRACE("scalar " + std::to_string(i));
    EXPECT_EQ(e.wall_time, scalars[i].wall_time);  // exact: stored as a double
    EXPECT_EQ(e.step, scalars[i].step);
    EXPECT_FALSE(e.file_version.has_value());
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].tag, scalars[i].tag);
    EXPECT_EQ(e.values[0].value, static_cast<float>(scalars[i].value));
  }
}

// ---- Tests -------------------------------------------------------------------------------------

TEST(TensorBoardTest, ReferenceCrcMatchesRfc3720Vectors) {
  // RFC 3720, appendix B.4.
  const ReferenceCrc32c& crc = reference_crc();
  EXPECT_EQ(crc.crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc.crc(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc.crc(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc.crc(descending), 0x113FDB5Cu);
  EXPECT_EQ(crc.crc("123456789"), 0xE3069283u);  // the usual check value
}

TEST(TensorBoardTest, ScalarEventMatchesBytesDerivedByHand) {
  // Event {wall_time: 1.5, step: 3, summary {value {tag: "loss", simple_value: 2.0}}}
  //   09                       key: field 1 (wall_time), wire type 1 (fixed64)
  //   00 00 00 00 00 00 F8 3F  1.5 = 0x3FF8000000000000 (sign 0, exponent 1023, mantissa .5),
  //                            little-endian
  //   10 03                    key: field 2 (step), wire type 0 (varint); 3
  //   2A 0D                    key: field 5 (summary), wire type 2; 13 bytes follow
  //     0A 0B                  Summary key: field 1 (value), wire type 2; 11 bytes follow
  //       0A 04 6C 6F 73 73    Value key: field 1 (tag), wire type 2; 4 bytes "loss"
  //       15 00 00 00 40       Value key: field 2 (simple_value), wire type 5 (fixed32);
  //                            2.0f = 0x40000000, little-endian
  const std::string expected =
      "09 00 00 00 00 00 00 F8 3F 10 03 2A 0D 0A 0B 0A 04 6C 6F 73 73 15 00 00 00 40";
  EXPECT_EQ(hex(encode_scalar_event("loss", 2.0, 3, 1.5)), expected);

  // Event {wall_time: 1.5, file_version: "brain.Event:2"}: key 0x1A is field 3, wire type 2.
  EXPECT_EQ(hex(encode_file_version_event(1.5)),
            "09 00 00 00 00 00 00 F8 3F 1A 0D 62 72 61 69 6E 2E 45 76 65 6E 74 3A 32");

  // The same event written through the file lands as the data of the second record.
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->add_scalar("loss", 2.0, 3, 1.5).ok());
  ASSERT_TRUE(writer->flush().ok());
  const DecodedFile file = decode_event_file(writer->path());
  ASSERT_TRUE(file.error.empty()) << file.error;
  ASSERT_EQ(file.events.size(), 2u);
  EXPECT_EQ(hex(file.events[1].data), expected);

  // Framing of that data: length 26 = 0x1A as eight little-endian bytes, then the CRCs.
  const std::string record = frame_tfrecord(file.events[1].data);
  ASSERT_EQ(record.size(), 8 + 4 + 26 + 4u);
  EXPECT_EQ(hex(record.substr(0, 8)), "1A 00 00 00 00 00 00 00");
  EXPECT_EQ(read_le(record, 8, 4), reference_crc().masked(record.substr(0, 8)));
  EXPECT_EQ(read_le(record, 38, 4), reference_crc().masked(record.substr(12, 26)));
}

TEST(TensorBoardTest, IndependentReaderDecodesEveryScalar) {
  test::TempDir dir("cann-tb");
  const double before = unix_now();
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  const std::vector<Scalar> scalars = sample_scalars();
  for (const Scalar& s : scalars) {
    ASSERT_TRUE(writer->add_scalar(s.tag, s.value, s.step, s.wall_time).ok());
  }
  ASSERT_TRUE(writer->flush().ok());
  const double after = unix_now();

  const DecodedFile file = decode_event_file(writer->path());
  expect_scalars(file, scalars);
  ASSERT_FALSE(file.events.empty());
  const DecodedEvent& version = file.events[0];
  EXPECT_EQ(version.file_version, std::optional<std::string>("brain.Event:2"));
  EXPECT_FALSE(version.has_summary);
  EXPECT_EQ(version.step, 0);
  EXPECT_GE(version.wall_time, before);
  EXPECT_LE(version.wall_time, after);
}

TEST(TensorBoardTest, ValuesBeyondFloatRangeSaturate) {
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->add_scalar("big", 1e300, 1, 1.0).ok());
  ASSERT_TRUE(writer->add_scalar("small", -1e300, 2, 1.0).ok());
  ASSERT_TRUE(writer->add_scalar("nan", std::nan(""), 3, 1.0).ok());
  ASSERT_TRUE(writer->add_scalar("tiny", 1e-300, 4, 1.0).ok());
  ASSERT_TRUE(writer->flush().ok());
  const DecodedFile file = decode_event_file(writer->path());
  ASSERT_TRUE(file.error.empty()) << file.error;
  ASSERT_EQ(file.events.size(), 5u);
  EXPECT_EQ(file.events[1].values.at(0).value, INFINITY);
  EXPECT_EQ(file.events[2].values.at(0).value, -INFINITY);
  EXPECT_TRUE(std::isnan(file.events[3].values.at(0).value));
  EXPECT_EQ(file.events[4].values.at(0).value, 0.0f);
}

TEST(TensorBoardTest, EmptyTagIsRejected) {
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  const Status s = writer->add_scalar("", 1.0, 5, 1.0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("hint:"), std::string::npos) << s.message();
  ASSERT_TRUE(writer->flush().ok());
  EXPECT_EQ(decode_event_file(writer->path()).events.size(), 1u);
}

TEST(TensorBoardTest, FileNameFollowsTensorBoardPattern) {
  test::TempDir dir("cann-tb");
  const std::string logdir = dir.file("runs/job 1");  // missing parents, a space
  const auto before = static_cast<int64_t>(unix_now());
  auto first = open_writer(logdir);
  auto second = open_writer(logdir);
  const auto after = static_cast<int64_t>(unix_now());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first->path(), second->path());

  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::regex pattern(R"(events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+))");
  for (const auto* writer : {first.get(), second.get()}) {
    const std::filesystem::path path(writer->path());
    EXPECT_EQ(path.parent_path(), std::filesystem::path(logdir));
    std::smatch m;
    const std::string name = path.filename().string();
    ASSERT_TRUE(std::regex_match(name, m, pattern)) << name;
    EXPECT_GE(std::stoll(m[1].str()), before);
    EXPECT_LE(std::stoll(m[1].str()), after);
    EXPECT_EQ(m[2].str(), host);
    EXPECT_EQ(std::stoll(m[3].str()), getpid());
  }
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(logdir)) {
    EXPECT_EQ(entry.path().filename().string().rfind("events.out.tfevents.", 0), 0u);
    ++files;
  }
  EXPECT_EQ(files, 2);
}

TEST(TensorBoardTest, OpenFailsWithAStatusOnAnUnusableDirectory) {
  test::TempDir dir("cann-tb");
  const std::string not_a_dir = dir.file("plain-file");
  test::write_text(not_a_dir, "x");
  auto writer = TensorBoardWriter::open(not_a_dir + "/logs");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kIoError);
}

TEST(TensorBoardTest, AppendsAcrossFlushesAndAtClose) {
  test::TempDir dir("cann-tb");
  const std::vector<Scalar> scalars = sample_scalars();
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  const std::string path = writer->path();

  // The file-version record is on disk from open() on; scalars wait for flush.
  const std::string at_open = slurp(path);
  ASSERT_EQ(decode_event_bytes(at_open).events.size(), 1u);
  ASSERT_TRUE(
      writer->add_scalar(scalars[0].tag, scalars[0].value, scalars[0].step, scalars[0].wall_time)
          .ok());
  EXPECT_EQ(slurp(path), at_open);

  std::vector<Scalar> written;
  written.push_back(scalars[0]);
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_TRUE(
        writer->add_scalar(scalars[i].tag, scalars[i].value, scalars[i].step, scalars[i].wall_time)
            .ok());
    written.push_back(scalars[i]);
  }
  ASSERT_TRUE(writer->flush().ok());
  const std::string after_first = slurp(path);
  expect_scalars(decode_event_bytes(after_first), written);

  for (size_t i = 3; i < 5; ++i) {
    ASSERT_TRUE(
        writer->add_scalar(scalars[i].tag, scalars[i].value, scalars[i].step, scalars[i].wall_time)
            .ok());
    written.push_back(scalars[i]);
  }
  ASSERT_TRUE(writer->flush().ok());
  ASSERT_TRUE(writer->flush().ok());  // nothing pending: a no-op
  const std::string after_second = slurp(path);
  EXPECT_EQ(after_second.compare(0, after_first.size(), after_first), 0) << "earlier bytes changed";
  expect_scalars(decode_event_bytes(after_second), written);

  // Closing writes what is still buffered.
  for (size_t i = 5; i < scalars.size(); ++i) {
    ASSERT_TRUE(
        writer->add_scalar(scalars[i].tag, scalars[i].value, scalars[i].step, scalars[i].wall_time)
            .ok());
    written.push_back(scalars[i]);
  }
  writer.reset();
  expect_scalars(decode_event_file(path), written);
}

TEST(TensorBoardTest, LargeVolumeIsWrittenWithoutExplicitFlush) {
  // 64 KiB of events go to the file on their own, so a writer that is never flushed still
  // shows progress; about 40-byte records make 10,000 scalars several such writes.
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  for (int step = 0; step < 10000; ++step) {
    ASSERT_TRUE(writer->add_scalar("loss", 1.0 / (step + 1), step, 1796230000.0 + step).ok());
  }
  const DecodedFile partial = decode_event_file(writer->path());
  ASSERT_TRUE(partial.error.empty()) << partial.error;
  EXPECT_GT(partial.events.size(), 1000u);
  ASSERT_TRUE(writer->flush().ok());
  const DecodedFile file = decode_event_file(writer->path());
  ASSERT_TRUE(file.error.empty()) << file.error;
  ASSERT_EQ(file.events.size(), 10001u);
  for (int step = 0; step < 10000; ++step) {
    ASSERT_EQ(file.events[step + 1].step, step);
    ASSERT_EQ(file.events[step + 1].values.at(0).value, static_cast<float>(1.0 / (step + 1)));
  }
}

TEST(TensorBoardTest, ReaderDetectsEveryCorruptedByteAndTruncation) {
  // Proves the reader above really checks: flipping any one byte of a file (length, either
  // CRC, or data) or cutting it inside a record must be reported.
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->add_scalar("loss", 2.0, 3, 1.5).ok());
  ASSERT_TRUE(writer->add_scalar("lr", 0.5, 4, 2.5).ok());
  ASSERT_TRUE(writer->flush().ok());
  const std::string good = slurp(writer->path());
  ASSERT_TRUE(decode_event_bytes(good).error.empty());

  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ flip);
      EXPECT_FALSE(decode_event_bytes(bad).error.empty())
          << "byte " << i << " xor " << int{flip} << " went unnoticed";
    }
  }
  std::vector<size_t> boundaries = {0};
  for (const DecodedEvent& e : decode_event_bytes(good).events) {
    boundaries.push_back(boundaries.back() + 16 + e.data.size());
  }
  ASSERT_EQ(boundaries.back(), good.size());
  for (size_t n = 0; n < good.size(); ++n) {
    const DecodedFile cut = decode_event_bytes(std::string_view(good).substr(0, n));
    const bool at_boundary = std::find(boundaries.begin(), boundaries.end(), n) != boundaries.end();
    EXPECT_EQ(cut.error.empty(), at_boundary) << "cut at " << n << ": " << cut.error;
  }
  // The reported reason names the failing check.
  std::string bad_data = good;
  bad_data[boundaries[1] + 14] ^= 0x04;
  EXPECT_NE(decode_event_bytes(bad_data).error.find("data CRC"), std::string::npos);
  std::string bad_length = good;
  bad_length[boundaries[2]] ^= 0x04;
  EXPECT_NE(decode_event_bytes(bad_length).error.find("length CRC"), std::string::npos);
}

TEST(TensorBoardTest, DiskFullIsReportedAndTheFileStaysReadable) {
  // A file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so write returns EFBIG) stands in
  // for a full disk. It is set in a forked child so that the test process keeps no limit.
  // Half the scalars are flushed first; the limit then falls inside a record of the second
  // half: the failed flush must cut the file back to the end of the first half, and the flush
  // after the limit is lifted must write every held event, once.
  test::TempDir dir("cann-tb");
  constexpr int kScalars = 100;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto fail = [](int code, const std::string& why) {
      std::fprintf(stderr, "child: %s\n", why.c_str());
      std::fflush(stderr);
      _exit(code);
    };
    signal(SIGXFSZ, SIG_IGN);
    auto opened = TensorBoardWriter::open(dir.path());
    if (!opened.ok()) fail(10, opened.status().message());
    auto writer = std::move(opened).value();
    for (int step = 0; step < kScalars; ++step) {
      if (!writer->add_scalar("loss", step * 0.5, step, 100.0 + step).ok()) fail(11, "add");
      if (step == kScalars / 2 - 1 && !writer->flush().ok()) fail(11, "first flush");
    }
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    const rlim_t unlimited = limit.rlim_cur;
    limit.rlim_cur = slurp(writer->path()).size() + 1001;
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) fail(12, "setrlimit");
    const Status full = writer->flush();
    if (full.code() != StatusCode::kIoError) fail(13, "flush past the limit: " + full.to_string());
    std::fprintf(stderr, "child: flush past the limit: %s\n", full.message().c_str());
    const DecodedFile cut = decode_event_file(writer->path());
    if (!cut.error.empty()) fail(14, "after the failed flush: " + cut.error);
    if (cut.events.size() != 1 + kScalars / 2) {
      fail(15, "after the failed flush: " + std::to_string(cut.events.size()) + " events");
    }
    limit.rlim_cur = unlimited;
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) fail(16, "setrlimit");
    const Status retry = writer->flush();
    if (!retry.ok()) fail(17, "retry: " + retry.message());
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died from signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  std::vector<Scalar> expected;
  for (int step = 0; step < kScalars; ++step) {
    expected.push_back({"loss", step * 0.5, step, 100.0 + step});
  }
  expect_scalars(decode_event_file(files[0]), expected);
}

TEST(TensorBoardTest, TensorBoardItselfLoadsTheFile) {
  if (std::system("/usr/bin/python3 -c 'import tensorboard' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 has no tensorboard package; the independent reader covers the format";
  }
  test::TempDir dir("cann-tb");
  auto writer = open_writer(dir.path());
  ASSERT_NE(writer, nullptr);
  std::vector<Scalar> scalars;
  for (const Scalar& s : sample_scalars()) {
    if (s.tag.size() < 50 && s.tag.find_first_of(" \n") == std::string::npos) scalars.push_back(s);
  }
  for (const Scalar& s : scalars) {
    ASSERT_TRUE(writer->add_scalar(s.tag, s.value, s.step, s.wall_time).ok());
  }
  ASSERT_TRUE(writer->flush().ok());

  // RawEventFileLoader (TensorBoard 2.x) hands back the records untouched; the older
  // EventFileLoader is the fallback. Either way TensorBoard's record reader checks the CRCs.
  const std::string script = dir.file("load.py");
  test::write_text(script, R"(import sys
from tensorboard.backend.event_processing import event_file_loader as efl
from tensorboard.compat.proto import event_pb2
raw = getattr(efl, "RawEventFileLoader", None)
if raw is not None:
    events = [event_pb2.Event.FromString(r) for r in raw(sys.argv[1]).Load()]
else:
    events = list(efl.EventFileLoader(sys.argv[1]).Load())
for e in events:
    if e.HasField("file_version"):
        print("version", e.file_version)
    for v in e.summary.value:
        print("scalar", v.tag, e.step, repr(v.simple_value), repr(e.wall_time))
)");
  const auto result = test::run_command({"/usr/bin/python3", script, writer->path()}, 120);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::istringstream lines(result.output);
  std::string kind, version;
  lines >> kind >> version;
  EXPECT_EQ(kind, "version");
  EXPECT_EQ(version, "brain.Event:2");
  for (const Scalar& s : scalars) {
    std::string tag, value, wall_time;
    int64_t step = 0;
    lines >> kind >> tag >> step >> value >> wall_time;
    EXPECT_EQ(kind, "scalar");
    EXPECT_EQ(tag, s.tag);
    EXPECT_EQ(step, s.step);
    EXPECT_EQ(static_cast<float>(std::strtod(value.c_str(), nullptr)), static_cast<float>(s.value));
    EXPECT_EQ(std::strtod(wall_time.c_str(), nullptr), s.wall_time);
  }
}

}  // namespace
}  // namespace cann::monitor
