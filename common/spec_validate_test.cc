#include "common/spec_validate.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/proto_yaml.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

using google::protobuf::util::MessageDifferencer;

constexpr char kRoot[] = "/var/lib/dhp/checkpoints";
constexpr char kNameRule[] =
    "use 1-63 characters from a-z, 0-9, '-', '_' and '.', starting with a letter or digit";
constexpr char kPresets[] = "tiny, qwen2_5_vl_3b, qwen2_5_vl_7b, qwen2_5_vl_32b, qwen2_5_vl_72b";

SpecOptions Options() {
  SpecOptions options;
  options.checkpoint_root = kRoot;
  return options;
}

// A valid spec, one top-level section per entry; a test case replaces or adds sections.
const std::vector<std::pair<std::string, std::string>>& BaseSections() {
  static const auto* sections = new std::vector<std::pair<std::string, std::string>>{
      {"name", "name: demo"},
      {"model", "model: {preset: qwen2_5_vl_7b}"},
      {"vision", "vision: {parallelism: sequence, degree: 4}"},
      {"text", "text: {parallelism: tensor, degree: 4}"},
      {"training", "training: {max_steps: 100}"},
      {"data", "data: {datasets: [shapes], registry: {shapes: {annotation_path: a.jsonl}}}"},
  };
  return *sections;
}

std::string SpecYaml(std::map<std::string, std::string> overrides) {
  std::string text;
  for (const auto& [key, section] : BaseSections()) {
    auto it = overrides.find(key);
    text += (it == overrides.end() ? section : it->second) + "\n";
    if (it != overrides.end()) overrides.erase(it);
  }
  for (const auto& [key, section] : overrides) text += section + "\n";
  return text;
}

TEST(SpecValidateTest, BaseSpecIsValid) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(SpecYaml({}), Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
}

struct BadSpec {
  const char* label;
  std::map<std::string, std::string> overrides;
  std::string error;
};

class BadSpecTest : public testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, FailsWithExactMessage) {
  const BadSpec& c = GetParam();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(SpecYaml(c.overrides), Options());
  ASSERT_FALSE(spec.ok()) << c.label;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
  EXPECT_EQ(spec.status().message(), c.error) << c.label;
}

const BadSpec kBadSpecs[] = {
    {"vision_degree_3_vs_16_heads",
     {{"vision", "vision: {parallelism: sequence, degree: 3}"}},
     "vision.degree: 3 does not divide the 16 attention heads of the qwen2_5_vl_7b vision "
     "encoder"},
    {"vision_tensor_mlp_width",
     {{"vision", "vision: {parallelism: tensor, degree: 8}"}},
     "vision.degree: 8 does not divide the 3420 MLP width (intermediate_size) of the "
     "qwen2_5_vl_7b vision encoder"},
    {"text_degree_vs_kv_heads",
     {{"model", "model: {preset: qwen2_5_vl_3b}"},
      {"text", "text: {parallelism: tensor, degree: 3}"}},
     "text.degree: 3 does not divide the 16 attention heads of qwen2_5_vl_3b; "
     "text.degree: 3 does not divide the 2 KV heads of qwen2_5_vl_3b and is not a multiple of "
     "them; text.degree: 3 does not divide the 11008 MLP width (intermediate_size) of "
     "qwen2_5_vl_3b"},
    {"text_degree_vs_heads_only",
     {{"text", "text: {parallelism: tensor, degree: 8}"}},
     "text.degree: 8 does not divide the 28 attention heads of qwen2_5_vl_7b"},
    {"unknown_preset",
     {{"model", "model: {preset: qwen2_5_vl_8b}"}},
     std::string("model.preset: unknown preset \"qwen2_5_vl_8b\"; known presets: ") + kPresets},
    {"missing_preset",
     {{"model", "model: {}"}},
     std::string("model.preset: is required unless model.weights_path names a Hugging Face "
                 "model directory; known presets: ") +
         kPresets},
    {"typo_vision_degre",
     {{"vision", "vision: {parallelism: sequence, degre: 4}"}},
     "vision.degre: unknown key; known keys: parallelism, degree, zero_stage, "
     "activation_checkpointing, dtype"},
    {"wrong_type",
     {{"vision", "vision: {degree: two}"}},
     "vision.degree: expected an integer, got \"two\""},
    {"vision_degree_zero",
     {{"vision", "vision: {parallelism: sequence, degree: 0}"}},
     "vision.degree: 0 must be at least 1"},
    {"text_degree_negative",
     {{"text", "text: {parallelism: tensor, degree: -2}"}},
     "text.degree: -2 must be at least 1"},
    {"vision_degree_without_parallelism",
     {{"vision", "vision: {degree: 2}"}},
     "vision.degree: 2 needs parallelism sequence or tensor (vision.parallelism is none)"},
    {"text_degree_without_parallelism",
     {{"text", "text: {parallelism: none, degree: 2}"}},
     "text.degree: 2 needs parallelism tensor (text.parallelism is none)"},
    {"zero_stage_3",
     {{"vision", "vision: {parallelism: sequence, degree: 4, zero_stage: 3}"}},
     "vision.zero_stage: 3 is not supported; dhp implements ZeRO stage 0 or 1"},
    {"text_sequence",
     {{"text", "text: {parallelism: sequence, degree: 4}"}},
     "text.parallelism: sequence is not supported for the text stage; use none or tensor"},
    {"name_missing", {{"name", ""}}, std::string("name: is required; ") + kNameRule},
    {"name_invalid",
     {{"name", "name: My Job"}},
     std::string("name: \"My Job\" is not a valid job name; ") + kNameRule},
    {"name_too_long",
     {{"name", "name: " + std::string(64, 'a')}},
     "name: \"" + std::string(64, 'a') + "\" is not a valid job name; " + kNameRule},
    {"elastic_min_above_own",
     {{"elastic", "elastic: {data_parallel_size: {min: 2}}"}},
     "elastic.data_parallel_size.min: 2 is above the spec's own 1; the range must include it"},
    {"elastic_min_zero",
     {{"elastic", "elastic: {text_degree: {min: 0}}"}},
     "elastic.text_degree.min: 0 must be at least 1"},
    {"elastic_max_below_own",
     {{"elastic", "elastic: {vision_degree: {max: 2}}"}},
     "elastic.vision_degree.max: 2 is below the spec's own 4; the range must include it"},
    {"elastic_max_over_limit",
     {{"elastic", "elastic: {data_parallel_size: {max: 99999}}"}},
     "elastic.data_parallel_size.max: 99999 is over the limit of 4096"},
    {"elastic_vision_tensor_range",
     {{"vision", "vision: {parallelism: tensor, degree: 2}"},
      {"elastic", "elastic: {vision_degree: {min: 1}}"}},
     "elastic.vision_degree: a range needs vision.parallelism sequence: a tensor-parallel "
     "vision stage's checkpoints cannot be resharded to another degree"},
    {"elastic_text_without_tensor",
     {{"text", "text: {parallelism: none}"}, {"elastic", "elastic: {text_degree: {max: 4}}"}},
     "elastic.text_degree: a range needs text.parallelism tensor"},
    {"elastic_unknown_key",
     {{"elastic", "elastic: {dp: {min: 1}}"}},
     "elastic.dp: unknown key; known keys: data_parallel_size, text_degree, vision_degree"},
    {"data_parallel_zero",
     {{"dp", "data_parallel_size: 0"}},
     "data_parallel_size: 0 must be at least 1"},
    // Bounds: 10^6 replicas overflowed int in the layout (a 500 over REST) and blocked the
    // controller's loop thread.
    {"data_parallel_over_limit",
     {{"dp", "data_parallel_size: 1000000"}},
     "data_parallel_size: 1000000 is over the limit of 4096"},
    {"degree_over_limit",
     {{"model", "model: {weights_path: /models/x}"},
      {"text", "text: {parallelism: tensor, degree: 2048}"}},
     "text.degree: 2048 is over the limit of 1024"},
    {"ranks_over_limit",
     {{"model", "model: {weights_path: /models/x}"},
      {"vision", "vision: {parallelism: sequence, degree: 64}"},
      {"text", "text: {parallelism: tensor, degree: 64}"},
      {"dp", "data_parallel_size: 2048"}},
     "data_parallel_size: 2048 replicas of 64 ranks make 131072 ranks, over the limit of 65536"},
    {"priority_over_limit",
     {{"priority", "priority: 2000000"}},
     "priority: 2000000 is outside -1000000..1000000"},
    {"restarts_over_limit",
     {{"restart", "restart: {max_restarts: 100000, stall_timeout_s: 10000000}"}},
     "restart.max_restarts: 100000 is over the limit of 10000; restart.stall_timeout_s: 10000000 "
     "is over the limit of 604800"},
    {"collective_timeout_not_below_stall",
     {{"restart", "restart: {stall_timeout_s: 60, collective_timeout_s: 60}"}},
     "restart.collective_timeout_s: 60 must be below restart.stall_timeout_s (60)"},
    {"collective_timeout_zero",
     {{"restart", "restart: {collective_timeout_s: 0, preemption_grace_s: -5}"}},
     "restart.collective_timeout_s: 0 must be at least 1 (seconds); restart.preemption_grace_s: "
     "-5 must be at least 1 (seconds)"},
    {"batch_not_divisible",
     {{"dp", "data_parallel_size: 4"}, {"training", "training: {batch_size: 6, max_steps: 1}"}},
     "training.batch_size: 6 is not divisible by data_parallel_size 4"},
    {"batch_negative",
     {{"training", "training: {batch_size: -1, max_steps: 1}"}},
     "training.batch_size: -1 must be at least 1"},
    {"micro_batch_not_dividing_the_replica_share",
     {{"dp", "data_parallel_size: 2"},
      {"training", "training: {batch_size: 8, micro_batch_size: 3, max_steps: 1}"}},
     "training.micro_batch_size: 3 does not divide the 4 samples per data-parallel replica "
     "(training.batch_size 8 / data_parallel_size 2); use a divisor of 4"},
    {"micro_batch_above_the_replica_share",
     {{"dp", "data_parallel_size: 2"},
      {"training", "training: {batch_size: 4, micro_batch_size: 4, max_steps: 1}"}},
     "training.micro_batch_size: 4 does not divide the 2 samples per data-parallel replica "
     "(training.batch_size 4 / data_parallel_size 2); use a divisor of 2"},
    {"fp16_everywhere",
     {{"vision", "vision: {dtype: fp16}"},
      {"text", "text: {dtype: fp16}"},
      {"training", "training: {grad_reduce_dtype: fp16, grad_accum_dtype: fp16, max_steps: 1}"}},
     "vision.dtype: fp16 needs loss scaling, which dhp does not implement; use bf16 or fp32; "
     "text.dtype: fp16 needs loss scaling, which dhp does not implement; use bf16 or fp32; "
     "training.grad_reduce_dtype: fp16 needs loss scaling, which dhp does not implement; use "
     "bf16 or fp32; training.grad_accum_dtype: fp16 needs loss scaling, which dhp does not "
     "implement; use bf16 or fp32"},
    {"micro_batch_zero",
     {{"training", "training: {batch_size: -2, micro_batch_size: 0, max_steps: 1}"}},
     "training.batch_size: -2 must be at least 1; training.micro_batch_size: 0 must be at least 1"},
    {"learning_rate_zero",
     {{"training", "training: {learning_rate: 0, max_steps: 1}"}},
     "training.learning_rate: 0 must be positive and finite"},
    {"learning_rate_inf",
     {{"training", "training: {learning_rate: .inf, max_steps: 1}"}},
     "training.learning_rate: inf must be positive and finite"},
    {"both_steps_and_epochs",
     {{"training", "training: {max_steps: 100, epochs: 2}"}},
     "training: set exactly one of max_steps and epochs, not both (max_steps 100, epochs 2)"},
    {"neither_steps_nor_epochs",
     {{"training", "training: {batch_size: 4}"}},
     "training: set exactly one of max_steps and epochs; neither is set"},
    {"max_steps_negative",
     {{"training", "training: {max_steps: -5}"}},
     "training.max_steps: -5 must not be negative"},
    {"warmup_negative",
     {{"training", "training: {max_steps: 5, warmup_steps: -1}"}},
     "training.warmup_steps: -1 must not be negative"},
    {"weight_decay_and_clip_negative",
     {{"training", "training: {max_steps: 5, weight_decay: -0.1, grad_clip_norm: -1}"}},
     "training.weight_decay: -0.1 must not be negative; "
     "training.grad_clip_norm: -1 must not be negative"},
    {"min_lr_above_lr",
     {{"training", "training: {max_steps: 5, learning_rate: 1e-5, min_learning_rate: 1e-3}"}},
     "training.min_learning_rate: 0.001 exceeds learning_rate 1e-05"},
    {"unknown_dataset",
     {{"data", "data: {datasets: [shapez], registry: {shapes: {annotation_path: a.jsonl}}}"}},
     "data.datasets[0]: \"shapez\" is not in data.registry; registered: shapes"},
    {"no_datasets",
     {{"data", "data: {registry: {shapes: {annotation_path: a.jsonl}}}"}},
     "data.datasets: at least one dataset is required; registered: shapes"},
    {"dataset_listed_twice",
     {{"data", "data: {datasets: [shapes, shapes], registry: {shapes: {annotation_path: a}}}"}},
     "data.datasets[1]: \"shapes\" is listed more than once"},
    {"registry_entry_incomplete",
     {{"data", "data: {datasets: [shapes], registry: {shapes: {image_root: i, weight: 0}}}"}},
     "data.registry.shapes.annotation_path: is required; data.registry.shapes.weight: 0 must "
     "be positive"},
    {"pixels_inverted",
     {{"data",
       "data: {datasets: [s], registry: {s: {annotation_path: a}}, min_pixels: 50176, "
       "max_pixels: 3136}"}},
     "data.min_pixels: 50176 exceeds data.max_pixels 3136"},
    {"max_seq_len_zero",
     {{"data", "data: {datasets: [s], registry: {s: {annotation_path: a}}, max_seq_len: 0}"}},
     "data.max_seq_len: 0 must be positive"},
    {"checkpoint_escapes_root",
     {{"checkpoint", "checkpoint: {directory: ../../etc}"}},
     "checkpoint.directory: \"../../etc\" escapes the checkpoint root /var/lib/dhp/checkpoints"},
    {"checkpoint_escapes_after_normalising",
     {{"checkpoint", "checkpoint: {directory: a/../../b}"}},
     "checkpoint.directory: \"a/../../b\" escapes the checkpoint root /var/lib/dhp/checkpoints"},
    {"checkpoint_absolute_outside_root",
     {{"checkpoint", "checkpoint: {directory: /var/lib/dhp/checkpoints-other/x}"}},
     "checkpoint.directory: \"/var/lib/dhp/checkpoints-other/x\" escapes the checkpoint root "
     "/var/lib/dhp/checkpoints"},
    {"checkpoint_is_root",
     {{"checkpoint", "checkpoint: {directory: ./a/..}"}},
     "checkpoint.directory: \"./a/..\" is the checkpoint root itself; name a subdirectory"},
    {"checkpoint_counts",
     {{"checkpoint", "checkpoint: {every_steps: -1, keep_latest: 0}"}},
     "checkpoint.every_steps: -1 must not be negative; checkpoint.keep_latest: 0 must be at "
     "least 1"},
    {"restarts_negative",
     {{"restart", "restart: {max_restarts: -1}"}},
     "restart.max_restarts: -1 must not be negative"},
};

INSTANTIATE_TEST_SUITE_P(Table, BadSpecTest, testing::ValuesIn(kBadSpecs),
                         [](const testing::TestParamInfo<BadSpec>& info) {
                           return std::string(info.param.label);
                         });

TEST(SpecValidateTest, DefaultsFilledOnMinimalSpec) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: min\n"
      "model: {preset: tiny}\n"
      "training: {epochs: 1}\n"
      "data: {datasets: [s], registry: {s: {annotation_path: s.jsonl}}}\n",
      Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->priority(), 0);
  EXPECT_EQ(spec->vision().parallelism(), v1::PARALLELISM_NONE);
  EXPECT_EQ(spec->vision().degree(), 1);
  EXPECT_TRUE(spec->vision().has_zero_stage());
  EXPECT_EQ(spec->vision().zero_stage(), 0);  // no sequence parallelism
  EXPECT_EQ(spec->vision().dtype(), v1::DTYPE_BF16);
  EXPECT_FALSE(spec->vision().activation_checkpointing());
  EXPECT_EQ(spec->text().parallelism(), v1::PARALLELISM_NONE);
  EXPECT_EQ(spec->text().degree(), 1);
  EXPECT_EQ(spec->text().dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(spec->data_parallel_size(), 1);
  EXPECT_EQ(spec->placement(), v1::PLACEMENT_COLLOCATE);
  const v1::TrainingSpec& t = spec->training();
  EXPECT_EQ(t.batch_size(), 1);  // = data_parallel_size
  EXPECT_EQ(t.micro_batch_size(), 1);  // the replica's whole share: no accumulation
  EXPECT_EQ(t.grad_reduce_dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(t.grad_accum_dtype(), v1::DTYPE_FP32);
  EXPECT_DOUBLE_EQ(t.learning_rate(), 1e-5);
  EXPECT_EQ(t.schedule(), v1::LR_SCHEDULE_COSINE);
  EXPECT_TRUE(t.has_warmup_steps());
  EXPECT_EQ(t.warmup_steps(), 0);
  EXPECT_TRUE(t.has_weight_decay());
  EXPECT_DOUBLE_EQ(t.weight_decay(), 0.0);
  EXPECT_DOUBLE_EQ(t.grad_clip_norm(), 1.0);
  EXPECT_EQ(t.max_steps(), 0);
  EXPECT_EQ(t.epochs(), 1);
  EXPECT_EQ(t.seed(), 42u);
  EXPECT_TRUE(t.has_min_learning_rate());
  EXPECT_DOUBLE_EQ(t.min_learning_rate(), 0.0);
  EXPECT_DOUBLE_EQ(spec->data().registry().at("s").weight(), 1.0);
  EXPECT_EQ(spec->data().min_pixels(), 3136);
  EXPECT_EQ(spec->data().max_pixels(), 12845056);
  EXPECT_EQ(spec->data().max_seq_len(), 8192);
  EXPECT_EQ(spec->checkpoint().every_steps(), 0);
  EXPECT_EQ(spec->checkpoint().keep_latest(), 3);
  EXPECT_EQ(spec->checkpoint().directory(), "min");
  EXPECT_TRUE(spec->checkpoint().has_async_write());
  EXPECT_TRUE(spec->checkpoint().async_write());
  EXPECT_EQ(spec->restart().max_restarts(), 0);
  EXPECT_EQ(spec->restart().stall_timeout_s(), 600);
  EXPECT_EQ(spec->restart().launch_timeout_s(), 120);
  EXPECT_EQ(spec->restart().collective_timeout_s(), 300);
  EXPECT_EQ(spec->restart().preemption_grace_s(), 120);
}

// The collective timeout defaults below a short stall timeout, so a dead peer is still named
// by the collective that waited for it.
TEST(SpecValidateTest, CollectiveTimeoutDefaultsBelowTheStallTimeout) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpec(SpecYaml({{"restart", "restart: {stall_timeout_s: 30}"}}), Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->restart().collective_timeout_s(), 29);
  spec = ParseJobSpec(SpecYaml({{"restart", "restart: {stall_timeout_s: 1}"}}), Options());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "restart.collective_timeout_s: 1 must be below restart.stall_timeout_s (1)");
}

TEST(SpecValidateTest, DefaultsDependOnOtherFields) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      SpecYaml({{"dp", "data_parallel_size: 3"}, {"text", "text: {dtype: fp32}"}}), Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->vision().zero_stage(), 1);        // sequence parallelism
  EXPECT_EQ(spec->training().batch_size(), 3);      // = data_parallel_size
  EXPECT_EQ(spec->training().micro_batch_size(), 1);  // = batch_size / data_parallel_size
  EXPECT_EQ(spec->text().dtype(), v1::DTYPE_FP32);  // given values are kept
  EXPECT_EQ(spec->text().parallelism(), v1::PARALLELISM_NONE);
  spec = ParseJobSpec(SpecYaml({{"dp", "data_parallel_size: 2"},
                                {"training", "training: {batch_size: 8, max_steps: 1}"}}),
                      Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().micro_batch_size(), 4);
  spec = ParseJobSpec(
      SpecYaml({{"dp", "data_parallel_size: 2"},
                {"training", "training: {batch_size: 8, micro_batch_size: 2, max_steps: 1}"}}),
      Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().micro_batch_size(), 2);  // given values are kept
}

TEST(SpecValidateTest, ExplicitZeroStageZeroIsKeptWithSequenceParallelism) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      SpecYaml({{"vision", "vision: {parallelism: sequence, degree: 2, zero_stage: 0}"}}),
      Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->vision().zero_stage(), 0);
}

TEST(SpecValidateTest, SeveralErrorsAreReportedTogetherInFieldOrder) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: Bad!\n"
      "model: {preset: qwen2_5_vl_7b}\n"
      "vision: {parallelism: sequence, degree: 3, zero_stage: 2}\n"
      "text: {parallelism: tensor, degree: 0}\n"
      "training: {max_steps: 10, epochs: 1, learning_rate: -1}\n"
      "data: {datasets: [x]}\n"
      "checkpoint: {directory: /etc}\n",
      Options());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            std::string("name: \"Bad!\" is not a valid job name; ") + kNameRule +
                "; vision.degree: 3 does not divide the 16 attention heads of the qwen2_5_vl_7b "
                "vision encoder; vision.zero_stage: 2 is not supported; dhp implements ZeRO "
                "stage 0 or 1; text.degree: 0 must be at least 1; training.learning_rate: -1 "
                "must be positive and finite; training: set exactly one of max_steps and "
                "epochs, not both (max_steps 10, epochs 1); data.datasets[0]: \"x\" is not in "
                "data.registry; registered: none; checkpoint.directory: \"/etc\" escapes the "
                "checkpoint root /var/lib/dhp/checkpoints");
}

TEST(SpecValidateTest, CheckpointDirectoryIsNormalised) {
  const std::pair<std::string, std::string> cases[] = {
      {"./runs//demo/", "runs/demo"},
      {"runs/x/../demo", "runs/demo"},
      {"/var/lib/dhp/checkpoints/runs/demo", "runs/demo"},
      {"/var/lib/dhp//checkpoints/./demo/", "demo"},
  };
  for (const auto& [in, want] : cases) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpec(SpecYaml({{"checkpoint", "checkpoint: {directory: \"" + in + "\"}"}}),
                     Options());
    ASSERT_TRUE(spec.ok()) << in << ": " << spec.status();
    EXPECT_EQ(spec->checkpoint().directory(), want) << in;
  }
}

TEST(SpecValidateTest, CheckpointDirectoryWithoutKnownRoot) {
  SpecOptions local;  // dhpctl's dry run: no root known
  absl::StatusOr<v1::JobSpec> ok = ParseJobSpec(SpecYaml({}), local);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->checkpoint().directory(), "demo");
  absl::StatusOr<v1::JobSpec> up =
      ParseJobSpec(SpecYaml({{"checkpoint", "checkpoint: {directory: ../x}"}}), local);
  EXPECT_EQ(up.status().message(), "checkpoint.directory: \"../x\" escapes the checkpoint root");
  absl::StatusOr<v1::JobSpec> abs =
      ParseJobSpec(SpecYaml({{"checkpoint", "checkpoint: {directory: /data/ckpt}"}}), local);
  EXPECT_EQ(abs.status().message(),
            "checkpoint.directory: \"/data/ckpt\" must be relative to the checkpoint root");
}

// A model directory instead of (or beside) a preset. `dirs` stands for the files a rank can
// read: weights_path -> the architecture its config.json describes.
SpecOptions WithModelDirs(std::map<std::string, ModelPreset> dirs) {
  SpecOptions o = Options();
  o.read_model_config = [dirs](const std::string& path) -> absl::StatusOr<ModelPreset> {
    auto it = dirs.find(path);
    if (it == dirs.end()) return absl::NotFoundError(path + "/config.json: no such file");
    return it->second;
  };
  return o;
}

ModelPreset Resized7B() {  // a 7B fine-tune with 12 text layers and 8 vision heads
  ModelPreset p = *FindModelPreset("qwen2_5_vl_7b");
  p.name = "ft";
  p.text.num_layers = 12;
  p.vision.num_heads = 8;
  return p;
}

TEST(SpecValidateTest, ModelDirectoryAloneNamesTheArchitecture) {
  const std::string dir_only = SpecYaml({{"model", "model: {weights_path: ft}"}});
  // The controller cannot read it: accepted, the stage checks are left to the ranks.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(dir_only, Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(ResolveSpecModel(*spec, Options()).status()));
  // A rank reads it: the config's 8 vision heads do not divide by vision.degree 16.
  SpecOptions rank = WithModelDirs({{"ft", Resized7B()}});
  absl::StatusOr<ModelPreset> model = ResolveSpecModel(*spec, rank);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->text.num_layers, 12);
  EXPECT_TRUE(ParseJobSpec(dir_only, rank).ok());
  absl::StatusOr<v1::JobSpec> bad =
      ParseJobSpec(SpecYaml({{"model", "model: {weights_path: ft}"},
                             {"vision", "vision: {parallelism: sequence, degree: 16}"}}),
                   rank);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "vision.degree: 16 does not divide the 8 attention heads of the ft vision encoder");
  // A directory without config.json names nothing.
  absl::StatusOr<v1::JobSpec> none =
      ParseJobSpec(SpecYaml({{"model", "model: {weights_path: empty}"}}), rank);
  EXPECT_EQ(none.status().message(),
            "model.weights_path: \"empty\": empty/config.json: no such file");
}

TEST(SpecValidateTest, PresetBesideModelDirectoryMustAgree) {
  SpecOptions rank =
      WithModelDirs({{"ft", Resized7B()}, {"7b", *FindModelPreset("qwen2_5_vl_7b")}});
  absl::StatusOr<v1::JobSpec> bad = ParseJobSpec(
      SpecYaml({{"model", "model: {preset: qwen2_5_vl_7b, weights_path: ft}"}}), rank);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "model.preset: qwen2_5_vl_7b disagrees with model.weights_path \"ft\"'s config.json: "
            "vision.num_heads: 16 vs 8, text.num_layers: 28 vs 12 (preset vs config.json)");
  absl::StatusOr<v1::JobSpec> same = ParseJobSpec(
      SpecYaml({{"model", "model: {preset: qwen2_5_vl_7b, weights_path: 7b}"}}), rank);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(ResolveSpecModel(*same, rank)->name, "qwen2_5_vl_7b");
  // A checkpoint directory without config.json (weights only): the preset decides.
  absl::StatusOr<v1::JobSpec> weights_only = ParseJobSpec(
      SpecYaml({{"model", "model: {preset: qwen2_5_vl_7b, weights_path: bare}"}}), rank);
  ASSERT_TRUE(weights_only.ok()) << weights_only.status();
  EXPECT_EQ(ResolveSpecModel(*weights_only, rank)->text.num_layers, 28);
}

TEST(SpecValidateTest, DiffModelPresetsNamesEveryField) {
  ModelPreset a = *FindModelPreset("tiny");
  EXPECT_TRUE(DiffModelPresets(a, a).empty());
  ModelPreset b = a;
  b.text.mrope_section = {4, 2, 2};
  b.text.rope_theta = 1e6;
  b.tokens.image_pad = 7;
  b.tokens.im_start = -1;  // unknown: matches anything
  EXPECT_EQ(DiffModelPresets(a, b),
            (std::vector<std::string>{"text.rope_theta: 10000 vs 1e+06",
                                      "text.mrope_section: [2, 3, 3] vs [4, 2, 2]",
                                      "tokens.image_pad: 1005 vs 7"}));
}

TEST(SpecValidateTest, NormalisedSpecIsAFixedPoint) {
  absl::StatusOr<v1::JobSpec> once = ParseJobSpec(SpecYaml({}), Options());
  ASSERT_TRUE(once.ok()) << once.status();
  absl::StatusOr<v1::JobSpec> twice = ParseJobSpec(ProtoToYaml(*once), Options());
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*once, *twice)) << ProtoToYaml(*twice);
}

// Service configs (controller, agent) share the folder but are not job specs.
bool IsJobSpecFile(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".yaml" && name.rfind("controller", 0) != 0 &&
         name.rfind("agent", 0) != 0;
}

TEST(SpecValidateTest, EveryConfigInConfigsValidates) {
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator("configs")) {
    if (!IsJobSpecFile(entry.path())) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str(), Options());
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
    if (spec.ok()) {
      EXPECT_EQ(spec->name() + ".yaml", entry.path().filename().string());
      EXPECT_EQ(spec->checkpoint().directory(), spec->name());
    }
    seen.insert(entry.path().filename().string());
  }
  for (const char* want : {"tiny-cpu.yaml", "qwen2_5_vl_7b-sp4-tp4.yaml",
                           "qwen2_5_vl_32b-sp8-tp8.yaml"}) {
    EXPECT_EQ(seen.count(want), 1u) << want;
  }
}

TEST(SpecValidateTest, TinyCpuConfigHasTheDemoLayout) {
  std::ifstream in("configs/tiny-cpu.yaml");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str(), Options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().preset(), "tiny");
  EXPECT_EQ(spec->vision().parallelism(), v1::PARALLELISM_SEQUENCE);
  EXPECT_EQ(spec->vision().degree(), 2);
  EXPECT_EQ(spec->text().parallelism(), v1::PARALLELISM_TENSOR);
  EXPECT_EQ(spec->text().degree(), 2);
  EXPECT_EQ(spec->vision().dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(spec->text().dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(spec->training().batch_size(), 4);
  EXPECT_DOUBLE_EQ(spec->training().learning_rate(), 1e-3);
  EXPECT_EQ(spec->training().warmup_steps(), 10);
  EXPECT_EQ(spec->training().max_steps(), 200);
  EXPECT_EQ(spec->checkpoint().every_steps(), 50);
  EXPECT_EQ(spec->checkpoint().keep_latest(), 2);
  EXPECT_EQ(spec->data().registry().at("shapes").annotation_path(), "data/shapes/train.jsonl");
  EXPECT_EQ(spec->data().registry().at("shapes").image_root(), "data/shapes");
  EXPECT_EQ(spec->data().max_pixels(), 50176);
  EXPECT_EQ(spec->data().min_pixels(), 3136);
  EXPECT_EQ(spec->data().max_seq_len(), 1024);
}

}  // namespace
}  // namespace dhp
