// dhp's model against the golden case in testdata/hf_golden, written once by transformers 5.23.0
// (tests/hf_model_parity.py --golden): a tiny Qwen2.5-VL (window attention with a full-attention
// block, GQA, M-RoPE 1/1/2) on a packed batch of two samples with one image each. The model is
// loaded from its config.json and safetensors alone, as a job spec naming the directory would.
#include <gtest/gtest.h>

#include <cstdio>

#include "worker/rank/hf_parity.h"

namespace dhp {
namespace {

constexpr char kGolden[] = "worker/rank/testdata/hf_golden";

TEST(HfGoldenTest, LogitsLossAndGradientNormsEqualTransformers) {
  absl::StatusOr<ParityReport> report = RunHfParity(kGolden);
  ASSERT_TRUE(report.ok()) << report.status();
  std::printf("%s", report->Table().c_str());
  ASSERT_EQ(report->rows.size(), 3u);  // logits, loss, gradient norms
  EXPECT_EQ(report->rows[0].what, "logits");
  EXPECT_EQ(report->rows[0].elements, report->rows[0].elements / 1024 * 1024);  // [S, 1024]
  EXPECT_EQ(report->rows[2].elements, 57);  // one norm per parameter
  for (const ParityRow& row : report->rows) {
    EXPECT_TRUE(row.ok()) << row.what << ": worst " << row.worst << " of its bound at "
                          << row.worst_at << ", max |diff| " << row.max_abs_diff;
  }
  EXPECT_NEAR(report->loss_hf, 6.90545082, 1e-7);  // printed by the script
}

TEST(HfGoldenTest, TighterBoundsThanTheDifferenceFail) {
  // The comparison is not vacuous: bounds far below the measured difference fail.
  ParityBounds tight;
  tight.logits = {1e-12, 0};
  absl::StatusOr<ParityReport> report = RunHfParity(kGolden, tight);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->rows[0].ok());
  EXPECT_FALSE(report->ok());
}

TEST(HfGoldenTest, MissingDirectoryIsAnError) {
  absl::StatusOr<ParityReport> report = RunHfParity("worker/rank/testdata/no_such_case");
  EXPECT_FALSE(report.ok());
}

}  // namespace
}  // namespace dhp
