// The precision fields of a normalised spec become the rank's DistTrainerOptions inputs.
#include "worker/rank/training_config.h"

#include <gtest/gtest.h>

#include "dhp/v1/job_spec.pb.h"

namespace dhp {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.mutable_training()->set_batch_size(4);
  spec.mutable_training()->set_max_steps(10);
  spec.mutable_training()->set_learning_rate(1e-4);
  spec.mutable_vision()->set_dtype(v1::DTYPE_BF16);
  spec.mutable_text()->set_dtype(v1::DTYPE_FP32);
  return spec;
}

TEST(TrainingConfigTest, DtypesAndGradientAccumulation) {
  v1::JobSpec spec = Spec();
  absl::StatusOr<TrainingConfig> c = TrainingConfigForSpec(spec, 100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vision_dtype, at::kBFloat16);
  EXPECT_EQ(c->text_dtype, at::kFloat);
  EXPECT_EQ(c->grad_reduce_dtype, at::kFloat);
  EXPECT_TRUE(c->fp32_grad_accumulation);  // unset (specs stored before the field): fp32

  spec.mutable_training()->set_grad_reduce_dtype(v1::DTYPE_BF16);
  spec.mutable_training()->set_grad_accum_dtype(v1::DTYPE_BF16);
  c = TrainingConfigForSpec(spec, 100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->grad_reduce_dtype, at::kBFloat16);
  EXPECT_FALSE(c->fp32_grad_accumulation);

  spec.mutable_training()->set_grad_accum_dtype(v1::DTYPE_FP32);
  c = TrainingConfigForSpec(spec, 100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->fp32_grad_accumulation);
}

TEST(TrainingConfigTest, Fp16AccumulationIsRefusedByName) {
  v1::JobSpec spec = Spec();
  spec.mutable_training()->set_grad_accum_dtype(v1::DTYPE_FP16);
  absl::StatusOr<TrainingConfig> c = TrainingConfigForSpec(spec, 100);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(c.status().message(),
            "training.grad_accum_dtype: fp16 needs loss scaling, which dhp does not implement; "
            "use bf16 or fp32");
}

}  // namespace
}  // namespace dhp
