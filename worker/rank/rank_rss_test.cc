// Issue 13: peak resident memory of shard-first construction and of sharded loading, on a
// mid-size model (~200M parameters). Each build runs in a child process (this binary re-run with
// DHP_RSS_CHILD set) so that each has its own high-water mark; the child prints how much VmHWM
// rose above VmRSS before building.
//   single  the whole Qwen2_5_VL in fp32, initialised in place (what dhp-train builds);
//   rank    text rank 0 of TP 4 (CreateTextTpModel over a FailingCommunicator: construction
//           needs only the group's shape) and the whole vision tower (Ulysses replicates it),
//           both read from InitTensorSource slice by slice (what a dhp-rank of sv1 x tt4 builds);
//   load4   the same rank read from a multi-file Hugging Face checkpoint of the model
//           (CreateModelSource, as dhp-rank opens model.weights_path), and load1 the same at TP 1.
// Construction only: optimizer state and activations come later and are the planner's part.
//
// Loading bound (the "one shard plus one tensor"): the loaded rank grows by at most
// 1.25 x (its parameter bytes + the largest tensor's bytes) + 32 MiB. Its parameters are the
// slices themselves (fp32 into fp32: no conversion copy), so what comes on top is the mapped
// checkpoint's pages while a tensor is copied (at most the tensor's byte span, dropped again
// after the copy: SafetensorsFile::Release) plus LibTorch's own start-up allocations (~8 MiB in
// the "rank" case, hence the fixed 32 MiB); the 25% covers page rounding at slice boundaries
// and the kernel mapping pages around each fault. The checkpoint is fp32, the worst case for
// mapped pages: a bf16 checkpoint maps half as many bytes for the same slices.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/mid_preset.h"
#include "common/remove_tree.h"
#include "common/proc_status.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/comm/failing_communicator.h"
#include "worker/model/param_init.h"
#include "worker/model/param_shapes.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/safetensors.h"
#include "worker/model/vision_model.h"
#include "worker/parallel/text_tp_model.h"
#include "worker/rank/model_init.h"

namespace dhp {
namespace {

constexpr char kChildEnv[] = "DHP_RSS_CHILD";
constexpr char kCheckpointEnv[] = "DHP_RSS_CHECKPOINT";
constexpr uint64_t kSeed = 7;
constexpr double kMiB = 1048576.0;

int64_t BuildSingle(const ModelPreset& preset) {
  Qwen2_5_VL model(preset);
  InitQwenWeights(*model, 0.02, kSeed);
  int64_t n = 0;
  for (const at::Tensor& p : model->parameters()) n += p.numel();
  return n;
}

// Text rank 0 of TP `tp` and the whole vision tower from `source`; the parameter count.
int64_t BuildRank(const ModelPreset& preset, const TensorSource& source, int tp) {
  comm::FailingCommunicator group("text.tp0", 0, tp);
  absl::StatusOr<tp::TextTpModel> text = tp::CreateTextTpModel(preset.text, source, group);
  TORCH_CHECK(text.ok(), text.status().ToString());
  VisionTransformer tower(preset.vision);
  at::NoGradGuard no_grad;
  for (auto& item : tower->named_parameters()) {
    item.value().set_data(source.Whole("visual." + item.key()));
  }
  int64_t n = 0;
  for (const at::Tensor& p : (*text)->parameters()) n += p.numel();
  for (const at::Tensor& p : tower->parameters()) n += p.numel();
  return n;
}

// "load4"/"load1": the rank of TP 4/1 from the checkpoint directory in $DHP_RSS_CHECKPOINT.
int64_t LoadRank(const ModelPreset& preset, int tp) {
  v1::JobSpec spec;
  spec.mutable_model()->set_weights_path(std::getenv(kCheckpointEnv));
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      CreateModelSource(spec, preset, "", at::TensorOptions().dtype(at::kFloat), nullptr);
  TORCH_CHECK(source.ok(), source.status().ToString());
  return BuildRank(preset, **source, tp);
}

int64_t BuildInChild(const std::string& what, const ModelPreset& preset) {
  if (what == "single") return BuildSingle(preset);
  if (what == "load4") return LoadRank(preset, 4);
  if (what == "load1") return LoadRank(preset, 1);
  return BuildRank(preset, InitTensorSource(QwenParamShapes(preset), kSeed, 0.02), 4);
}

// In a child (DHP_RSS_CHILD set): builds, prints "DHP_RSS <params> <rise>" and exits.
void MaybeRunAsChild() {
  const char* what = std::getenv(kChildEnv);
  if (what == nullptr) return;
  const int64_t before = ProcSelfStatusBytes("VmRSS");
  const int64_t params = BuildInChild(what, MidSizePreset());
  std::printf("DHP_RSS %lld %lld\n", static_cast<long long>(params),
              static_cast<long long>(ProcSelfStatusBytes("VmHWM") - before));
  std::fflush(stdout);
  std::_Exit(0);
}

struct Measured {
  int64_t params = 0, rise = 0;
};

// Runs this test binary again as a child building `what`; parses its "params rise" line.
Measured RunChild(const std::string& what) {
  char self[4096] = {};
  EXPECT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const std::string cmd = std::string(kChildEnv) + "=" + what + " '" + self +
                          "' --gtest_filter=RankRssTest.* 2>&1";
  FILE* out = popen(cmd.c_str(), "r");
  EXPECT_NE(out, nullptr);
  Measured m;
  char line[256];
  while (out != nullptr && std::fgets(line, sizeof line, out) != nullptr) {
    long long params = 0, rise = 0;
    if (std::sscanf(line, "DHP_RSS %lld %lld", &params, &rise) == 2) m = {params, rise};
  }
  if (out != nullptr) {
    EXPECT_EQ(pclose(out), 0) << what;
  }
  return m;
}

int64_t Fp32Bytes(const ParamShape& p) {
  int64_t bytes = 4;
  for (int64_t d : p.shape) bytes *= d;
  return bytes;
}

// Writes the initialised model as Hugging Face shards it (save_pretrained): fp32 tensors in name
// order, a new file whenever the next tensor would pass `max_file_bytes`, and
// model.safetensors.index.json. One tensor is in memory at a time. Returns the number of files.
int WriteMultiFileCheckpoint(const std::string& dir, const ModelPreset& preset,
                             int64_t max_file_bytes) {
  const InitTensorSource source(QwenParamShapes(preset), kSeed, 0.02);
  std::vector<ParamShape> shapes = QwenParamShapes(preset);
  std::sort(shapes.begin(), shapes.end(),
            [](const ParamShape& a, const ParamShape& b) { return a.name < b.name; });
  std::vector<std::vector<StTensorSource>> files(1);
  int64_t file_bytes = 0, total = 0;
  for (const ParamShape& p : shapes) {
    const int64_t bytes = Fp32Bytes(p);
    if (file_bytes > 0 && file_bytes + bytes > max_file_bytes) {
      files.emplace_back();
      file_bytes = 0;
    }
    file_bytes += bytes;
    total += bytes;
    auto produce = [&source, name = p.name](const StTensorSource::WriteFn& write) {
      const at::Tensor t = source.Whole(name);
      write(t.data_ptr(), t.nbytes());
      return absl::OkStatus();
    };
    files.back().push_back({p.name, StDtype::kF32, p.shape, produce});
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t f = 0; f < files.size(); ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
    EXPECT_TRUE(WriteSafetensorsStreamed(dir + "/" + name, files[f]).ok()) << name;
    for (const StTensorSource& t : files[f]) index["weight_map"][t.name] = name;
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
  return static_cast<int>(files.size());
}

TEST(RankRssTest, ATp4RankGrowsByLessThanAThirdOfTheSingleRankModel) {
  MaybeRunAsChild();
  const Measured single = RunChild("single");
  const Measured rank = RunChild("rank");
  std::printf("single-rank model: %lld parameters, peak RSS rise %.1f MiB\n"
              "text TP rank 0 of 4 + vision tower: %lld parameters, peak RSS rise %.1f MiB "
              "(%.1f%% of the single-rank rise)\n",
              static_cast<long long>(single.params), single.rise / kMiB,
              static_cast<long long>(rank.params), rank.rise / kMiB,
              100.0 * rank.rise / single.rise);
  ASSERT_GT(single.params, 190'000'000);
  ASSERT_LT(single.params, 230'000'000);
  ASSERT_GT(rank.params, 0);
  // The parameters alone: the single-rank fp32 model is ~0.8 GB, and its peak is at least that.
  EXPECT_GT(single.rise, single.params * 4);
  EXPECT_LT(rank.rise * 3, single.rise);
}

TEST(RankRssTest, LoadingATp4RankFromAMultiFileCheckpointStaysWithinItsShardPlusOneTensor) {
  MaybeRunAsChild();
  const ModelPreset preset = MidSizePreset();
  const std::string dir = testing::TempDir() + "/rank_rss_checkpoint";
  RemoveTree(dir);
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  const int files = WriteMultiFileCheckpoint(dir, preset, 200 << 20);
  ASSERT_GT(files, 2);
  setenv(kCheckpointEnv, dir.c_str(), 1);
  const Measured tp4 = RunChild("load4");
  const Measured tp1 = RunChild("load1");
  RemoveTree(dir);
  int64_t largest = 0;
  for (const ParamShape& p : QwenParamShapes(preset)) largest = std::max(largest, Fp32Bytes(p));
  const double slack = 1.25, allowance = 32 * kMiB;
  for (const auto& [label, m] : {std::pair{"text TP rank 0 of 4 + vision tower", tp4},
                                 std::pair{"text TP 1 + vision tower (whole model)", tp1}}) {
    const int64_t shard = m.params * 4;
    const double bound = slack * (shard + largest) + allowance;
    std::printf("loading %s from %d checkpoint files: peak RSS rise %.1f MiB; shard %.1f MiB, "
                "largest tensor %.1f MiB, bound 1.25 x (shard + largest) + 32 MiB = %.1f MiB\n",
                label, files, m.rise / kMiB, shard / kMiB, largest / kMiB, bound / kMiB);
    ASSERT_GT(m.params, 0) << label;
    EXPECT_LT(m.rise, bound) << label;
    EXPECT_GT(m.rise, shard) << label;  // the parameters are resident
  }
  EXPECT_LT(tp4.params * 3, tp1.params);
}

}  // namespace
}  // namespace dhp
