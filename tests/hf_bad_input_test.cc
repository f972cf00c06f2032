// `run --init-from` on broken Hugging Face weights: each case is one line naming the tensor
// and the file, exit 1, and nothing is loaded (every check runs before any parameter is
// written).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "ckpt/safetensors.h"
#include "core/fs.h"
#include "hf_test_models.h"
#include "run_args.h"
#include "test_util.h"
#include "train/hf_weights.h"

namespace cann {
namespace {

using test::TempDir;

struct BadCase {
  std::string name;
  std::function<void(const std::string& dir)> damage;
  std::vector<std::string> says;  // substrings of the one line ("DIR" is the directory)
};

// The tensors of dir/model.safetensors through `edit`, written back as F32.
void edit_tensors(const std::string& dir, const std::function<void(ckpt::SafeTensors&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  auto st = ckpt::read_safetensors(path);
  CANN_CHECK(st.ok()) << st.status().message();
  edit(*st);
  CANN_CHECK(ckpt::write_safetensors(path, *st).ok());
}

std::vector<BadCase> bad_cases() {
  const std::string fc_b = "transformer.h.1.mlp.c_fc.bias";
  return {
      {"missing tensor",
       [=](const std::string& d) {
         edit_tensors(d, [&](ckpt::SafeTensors& st) {
           std::erase_if(st.tensors, [&](const ckpt::SafeTensor& t) { return t.name == fc_b; });
         });
       },
       {"tensor " + fc_b + " is missing from the weights in DIR (DIR/config.json"}},
      {"extra tensor",
       [](const std::string& d) {
         edit_tensors(d, [](ckpt::SafeTensors& st) {
           st.tensors.push_back({"transformer.h.9.ln_1.weight", {32}, std::vector<float>(32)});
         });
       },
       {"tensor transformer.h.9.ln_1.weight in DIR/model.safetensors is not a parameter"}},
      {"wrong shape",
       [=](const std::string& d) {
         edit_tensors(d, [&](ckpt::SafeTensors& st) {
           for (auto& t : st.tensors)
             if (t.name == fc_b) t = {fc_b, {64}, std::vector<float>(64)};
         });
       },
       {"tensor " + fc_b +
        " in DIR/model.safetensors has shape [64] but DIR/config.json makes "
        "it [128]"}},
      {"truncated file",
       [](const std::string& d) {
         const std::string bytes = test::read_text(d + "/model.safetensors");
         test::write_text(d + "/model.safetensors", bytes.substr(0, bytes.size() - 100));
       },
       {"DIR/model.safetensors: not a readable safetensors file: tensor transformer.ln_f.bias's "
        "data_offsets do not fit the file: its data ends at byte",
        "(the file is truncated)"}},
      {"unreadable dtype",
       [](const std::string& d) {
         auto st = ckpt::read_safetensors(d + "/model.safetensors");
         std::vector<test::RawTensor> raw;
         for (const auto& t : st->tensors) {
           test::RawTensor r{
               t.name, "F32", t.shape,
               std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4)};
           if (t.name == "transformer.wpe.weight") {  // as I64: twice the bytes
             r.dtype = "I64";
             r.bytes += r.bytes;
           }
           raw.push_back(r);
         }
         test::write_raw_safetensors(d + "/model.safetensors", raw);
       },
       {"tensor transformer.wpe.weight in DIR/model.safetensors is I64, which cann-train does "
        "not read"}},
      {"config disagrees with the weights",
       [](const std::string& d) {
         std::string c = test::read_text(d + "/config.json");
         c.replace(c.find("\"hidden_size\":32"), 16, "\"hidden_size\":48");
         test::write_text(d + "/config.json", c);
       },
       {"tensor transformer.wte.weight in DIR/model.safetensors has shape [64, 32] but "
        "DIR/config.json makes it [64, 48]"}},
      {"missing index shard",
       [](const std::string& d) {
         // Re-export in shards of 20 kB, then lose the second.
         const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[0]);
         std::vector<float> p;
         CANN_CHECK(train::load_hf_weights(spec, d, &p).ok());
         CANN_CHECK(remove_all(d + "/model.safetensors").ok());
         CANN_CHECK(train::export_hf(spec, p.data(), d, 20000).ok());
         auto names = list_dir(d);
         std::string second;
         for (const std::string& n : *names)
           if (n.starts_with("model-00002-of-")) second = n;
         CANN_CHECK(!second.empty());
         CANN_CHECK(remove_all(d + "/" + second).ok());
       },
       {"DIR/model.safetensors.index.json names model-00002-of-", "for tensor transformer.",
        ", which is missing"}},
  };
}

std::string with_dir(std::string text, const std::string& dir) {
  for (size_t at = text.find("DIR"); at != std::string::npos; at = text.find("DIR", at))
    text.replace(at, 3, dir), at += dir.size();
  return text;
}

TEST(HfBadInput, EachIsOneLineNamingTensorAndFileExitOne) {
  const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[0]);
  const std::vector<float> params = test::random_params(spec, 21);
  TempDir data;
  test::write_token_data(data.path(), 3, 2, 16);
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    ASSERT_TRUE(train::export_hf(spec, params.data(), dir.path()).ok());
    c.damage(dir.path());
    const auto r = test::run_cann(test::RunArgs()
                                      .flag("--init-from", dir.path())
                                      .data(data.path())
                                      .steps(1)
                                      .batch_size(2)
                                      .seq_len(16)
                                      .quiet(),
                                  60);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    for (const std::string& s : c.says)
      EXPECT_NE(r.output.find(with_dir(s, dir.path())), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
  }
}

// A failure late in the checks leaves the destination as it was: nothing half-loaded.
TEST(HfBadInput, NothingIsWrittenBeforeEveryCheckPassed) {
  const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[1]);  // llama
  const std::vector<float> params = test::random_params(spec, 22);
  TempDir dir;
  ASSERT_TRUE(train::export_hf(spec, params.data(), dir.path()).ok());
  // The last tensor written (lm_head) has the wrong shape.
  edit_tensors(dir.path(), [](ckpt::SafeTensors& st) { st.tensors.back().shape = {32, 64}; });
  std::vector<float> dest(7, 0.5f);
  Status s = train::load_hf_weights(spec, dir.path(), &dest);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor lm_head.weight"), std::string::npos) << s.message();
  EXPECT_EQ(dest, std::vector<float>(7, 0.5f));
}

// Every prefix of a weight file is refused as a DataLoss naming the file, never read past its
// end (this suite also runs under AddressSanitizer), and so is a directory whose index is not
// JSON.
TEST(HfBadInput, EveryTruncationAndABrokenIndexAreErrors) {
  const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[0]);
  const std::vector<float> params = test::random_params(spec, 23);
  TempDir dir, cut;
  ASSERT_TRUE(train::export_hf(spec, params.data(), dir.path()).ok());
  const std::string bytes = test::read_text(dir.file("model.safetensors"));
  test::write_text(cut.file("config.json"), test::read_text(dir.file("config.json")));
  for (size_t n = 0; n < bytes.size(); n += 97) {
    test::write_text(cut.file("model.safetensors"), bytes.substr(0, n));
    std::vector<float> out;
    Status s = train::load_hf_weights(spec, cut.path(), &out);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
    EXPECT_NE(s.message().find(cut.file("model.safetensors")), std::string::npos) << s.message();
    EXPECT_TRUE(out.empty());
  }
  test::write_text(cut.file("model.safetensors"), bytes);
  test::write_text(cut.file("model.safetensors.index.json"), "{\"weight_map\": [");
  std::vector<float> out;
  Status s = train::load_hf_weights(spec, cut.path(), &out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
  EXPECT_NE(s.message().find("model.safetensors.index.json: not a safetensors index"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace cann
