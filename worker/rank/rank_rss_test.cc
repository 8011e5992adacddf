// Issue 13: on a mid-size model (~200M parameters) a text rank of TP 4 built shard-first grows
// its resident memory by less than 1/3 of what building the single-rank model does. Each build
// runs in a child process (this binary re-run with DHP_RSS_CHILD set) so that each has its own
// high-water mark; the child prints how much VmHWM rose above VmRSS before building.
//   single  the whole Qwen2_5_VL in fp32, initialised in place (what dhp-train builds);
//   rank    text rank 0 of TP 4 (CreateTextTpModel over a FailingCommunicator: construction
//           needs only the group's shape) and the whole vision tower (Ulysses replicates it),
//           both read from InitTensorSource slice by slice (what a dhp-rank of sv1 x tt4 builds).
// Construction only: optimizer state and activations come later and are the planner's part.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "common/mid_preset.h"
#include "common/proc_status.h"
#include "worker/comm/failing_communicator.h"
#include "worker/model/param_init.h"
#include "worker/model/param_shapes.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/vision_model.h"
#include "worker/parallel/text_tp_model.h"

namespace dhp {
namespace {

constexpr char kChildEnv[] = "DHP_RSS_CHILD";
constexpr uint64_t kSeed = 7;

int64_t BuildSingle(const ModelPreset& preset) {
  Qwen2_5_VL model(preset);
  InitQwenWeights(*model, 0.02, kSeed);
  int64_t n = 0;
  for (const at::Tensor& p : model->parameters()) n += p.numel();
  return n;
}

int64_t BuildRank(const ModelPreset& preset) {
  InitTensorSource source(QwenParamShapes(preset), kSeed, 0.02);
  comm::FailingCommunicator tp("text.tp0", 0, 4);
  absl::StatusOr<tp::TextTpModel> text = tp::CreateTextTpModel(preset.text, source, tp);
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
  if (out != nullptr) EXPECT_EQ(pclose(out), 0) << what;
  return m;
}

TEST(RankRssTest, ATp4RankGrowsByLessThanAThirdOfTheSingleRankModel) {
  if (const char* what = std::getenv(kChildEnv)) {
    const int64_t before = ProcSelfStatusBytes("VmRSS");
    const ModelPreset preset = MidSizePreset();
    const int64_t params = std::string(what) == "single" ? BuildSingle(preset) : BuildRank(preset);
    std::printf("DHP_RSS %lld %lld\n", static_cast<long long>(params),
                static_cast<long long>(ProcSelfStatusBytes("VmHWM") - before));
    std::fflush(stdout);
    std::_Exit(0);
  }
  const Measured single = RunChild("single");
  const Measured rank = RunChild("rank");
  std::printf("single-rank model: %lld parameters, peak RSS rise %.1f MiB\n"
              "text TP rank 0 of 4 + vision tower: %lld parameters, peak RSS rise %.1f MiB "
              "(%.1f%% of the single-rank rise)\n",
              static_cast<long long>(single.params), single.rise / 1048576.0,
              static_cast<long long>(rank.params), rank.rise / 1048576.0,
              100.0 * rank.rise / single.rise);
  ASSERT_GT(single.params, 190'000'000);
  ASSERT_LT(single.params, 230'000'000);
  ASSERT_GT(rank.params, 0);
  // The parameters alone: the single-rank fp32 model is ~0.8 GB, and its peak is at least that.
  EXPECT_GT(single.rise, single.params * 4);
  EXPECT_LT(rank.rise * 3, single.rise);
}

}  // namespace
}  // namespace dhp
