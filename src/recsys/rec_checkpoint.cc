// Dense state files and the commit marker; see rec_checkpoint.h.
//
// dense-NNNNNNNN.bin: "CRDN" magic, uint32 version 1, int32 step, int64 n, n floats each of
// parameters, m and v, uint32 CRC-32C of everything before. committed: the text "step N\n".
#include "recsys/rec_checkpoint.h"

#include <cstdio>
#include <cstring>

#include "core/crc32c.h"
#include "core/fs.h"

namespace cann::recsys {
namespace {

constexpr char kMagic[4] = {'C', 'R', 'D', 'N'};
constexpr uint32_t kVersion = 1;

std::string dense_name(int step) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "dense-%08d.bin", step);
  return buf;
}

}  // namespace

Status save_dense(const std::string& dir, int step, const float* params, const float* m,
                  const float* v, int64_t n) {
  CANN_RETURN_IF_ERROR(make_dirs(dir));
  std::string out(kMagic, 4);
  out.append(reinterpret_cast<const char*>(&kVersion), 4);
  out.append(reinterpret_cast<const char*>(&step), 4);
  out.append(reinterpret_cast<const char*>(&n), 8);
  for (const float* p : {params, m, v}) out.append(reinterpret_cast<const char*>(p), n * 4);
  const uint32_t crc = crc32c(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return write_file_atomic(join_path(dir, dense_name(step)), out);
}

Status load_dense(const std::string& dir, int step, float* params, float* m, float* v, int64_t n) {
  const std::string path = join_path(dir, dense_name(step));
  CANN_ASSIGN_OR_RETURN(std::string in, read_file(path));
  const size_t want = 4 + 4 + 4 + 8 + 3 * n * 4 + 4;
  uint32_t crc = 0, version = 0;
  int saved_step = 0;
  int64_t saved_n = 0;
  if (in.size() >= 20) {
    std::memcpy(&version, in.data() + 4, 4);
    std::memcpy(&saved_step, in.data() + 8, 4);
    std::memcpy(&saved_n, in.data() + 12, 8);
  }
  if (in.size() != want || std::memcmp(in.data(), kMagic, 4) != 0 || version != kVersion ||
      saved_step != step || saved_n != n)
    return DataLoss(path + ": not the dense state of step " + std::to_string(step) + " with " +
                    std::to_string(n) +
                    " parameters; hint: resume with the model the checkpoint was written by");
  std::memcpy(&crc, in.data() + in.size() - 4, 4);
  if (crc32c(in.data(), in.size() - 4) != crc)
    return DataLoss(path + ": checksum mismatch; hint: the file is damaged");
  const char* at = in.data() + 20;
  for (float* p : {params, m, v}) {
    std::memcpy(p, at, n * 4);
    at += n * 4;
  }
  return OkStatus();
}

Status commit_step(const std::string& dir, int step) {
  CANN_RETURN_IF_ERROR(
      write_file_atomic(join_path(dir, "committed"), "step " + std::to_string(step) + "\n"));
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(dir));
  for (const auto& name : names)
    if (name.rfind("dense-", 0) == 0 && name != dense_name(step))
      CANN_RETURN_IF_ERROR(remove_all(join_path(dir, name)));
  return OkStatus();
}

StatusOr<int> committed_step(const std::string& dir) {
  const std::string path = join_path(dir, "committed");
  if (!path_exists(path)) return 0;
  CANN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  int step = 0;
  if (std::sscanf(text.c_str(), "step %d", &step) != 1 || step < 0)
    return DataLoss(path + ": unreadable ('" + text.substr(0, 40) +
                    "'); hint: it should say 'step N'");
  return step;
}

}  // namespace cann::recsys
