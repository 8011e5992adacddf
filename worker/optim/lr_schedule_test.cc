#include "worker/optim/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace dhp {
namespace {

LrScheduleConfig Config(LrScheduleKind kind) {
  LrScheduleConfig c;
  c.kind = kind;
  c.peak = 1e-3;
  c.floor = 1e-4;
  c.warmup_steps = 10;
  c.max_steps = 110;  // 100 decay steps
  return c;
}

TEST(LrScheduleTest, WarmupIsLinearFromZero) {
  for (LrScheduleKind kind :
       {LrScheduleKind::kConstant, LrScheduleKind::kCosine, LrScheduleKind::kLinear}) {
    const LrScheduleConfig c = Config(kind);
    EXPECT_EQ(LearningRateAt(c, 0), 0.0);
    EXPECT_DOUBLE_EQ(LearningRateAt(c, 1), 1e-4);
    EXPECT_DOUBLE_EQ(LearningRateAt(c, 5), 5e-4);
    EXPECT_DOUBLE_EQ(LearningRateAt(c, 9), 9e-4);
    EXPECT_DOUBLE_EQ(LearningRateAt(c, 10), 1e-3);  // the peak, at step == warmup_steps
    EXPECT_EQ(LearningRateAt(c, -3), 0.0);
  }
}

TEST(LrScheduleTest, CosineDecaysToTheFloor) {
  const LrScheduleConfig c = Config(LrScheduleKind::kCosine);
  // p = (step - 10) / 100; lr = 1e-4 + 9e-4 * 0.5 * (1 + cos(pi p)).
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), 1e-4 + 9e-4 * 0.5);                     // p = 1/2
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 35), 1e-4 + 9e-4 * 0.5 * (1 + std::sqrt(0.5)));  // 1/4
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 85), 1e-4 + 9e-4 * 0.5 * (1 - std::sqrt(0.5)));  // 3/4
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 110), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 500), 1e-4);  // past the end: the floor
  // The last update of the run (index 109) is just above the floor.
  EXPECT_GT(LearningRateAt(c, 109), 1e-4);
  EXPECT_LT(LearningRateAt(c, 109), 1.003e-4);
  // Monotone after warmup.
  for (int64_t s = 10; s < 110; ++s) EXPECT_GE(LearningRateAt(c, s), LearningRateAt(c, s + 1));
}

TEST(LrScheduleTest, LinearDecaysToTheFloor) {
  const LrScheduleConfig c = Config(LrScheduleKind::kLinear);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), 5.5e-4);   // 1e-4 + 9e-4 * 0.5
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 20), 9.1e-4);   // 1e-4 + 9e-4 * 0.9
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 110), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 111), 1e-4);
}

TEST(LrScheduleTest, ConstantStaysAtThePeak) {
  const LrScheduleConfig c = Config(LrScheduleKind::kConstant);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 1000), 1e-3);
}

TEST(LrScheduleTest, NoWarmupStartsAtThePeak) {
  LrScheduleConfig c = Config(LrScheduleKind::kCosine);
  c.warmup_steps = 0;
  c.floor = 0;
  c.max_steps = 4;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 0), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 2), 5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 4), 0.0);
}

TEST(LrScheduleTest, WarmupLongerThanTheRun) {
  LrScheduleConfig c = Config(LrScheduleKind::kCosine);
  c.warmup_steps = 20;
  c.max_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 9), 4.5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 20), 1e-3);
}

TEST(LrScheduleTest, ValidationNamesTheField) {
  LrScheduleConfig c = Config(LrScheduleKind::kCosine);
  EXPECT_TRUE(ValidateLrSchedule(c).ok());
  c.floor = 2e-3;
  EXPECT_NE(ValidateLrSchedule(c).message().find("floor"), std::string::npos);
  c = Config(LrScheduleKind::kCosine);
  c.max_steps = 0;
  EXPECT_NE(ValidateLrSchedule(c).message().find("max_steps"), std::string::npos);
  c = Config(LrScheduleKind::kCosine);
  c.warmup_steps = -1;
  EXPECT_NE(ValidateLrSchedule(c).message().find("warmup_steps"), std::string::npos);
}

}  // namespace
}  // namespace dhp
