// DistData on a generated shapes dataset: the global batch split over data-parallel replicas as
// DataLoader shards it and each share into micro-batches, deterministic, resumable with Seek, and
// a clear error when a micro-batch does not fit one packed sequence.
#include "worker/rank/dist_data.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/spec_validate.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace {

using ::testing::HasSubstr;

std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/dist_data_test";
}

class DistDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data::ShapesDatasetOptions o;
    o.out_dir = Root() + "/data/shapes";
    o.count = 10;  // not a multiple of the batch: steps cross epochs
    o.size = 56;
    const absl::Status s = data::WriteShapesDataset(o);
    ASSERT_TRUE(s.ok()) << s;
  }

  static v1::JobSpec Spec(int dp) {
    std::ifstream in("configs/tiny-cpu.yaml");
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str(), {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->set_data_parallel_size(dp);
    spec->mutable_training()->set_batch_size(4);
    spec->mutable_training()->clear_micro_batch_size();  // the whole share
    return *spec;
  }

  static std::unique_ptr<DistData> Make(const v1::JobSpec& spec, int replica = -1) {
    DataPipelineOptions o;
    o.data_root = Root();
    absl::StatusOr<std::unique_ptr<DistData>> d =
        DistData::Create(spec, *FindModelPreset("tiny"), o, at::kCPU, replica);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }
};

TEST_F(DistDataTest, SplitsTheGlobalBatchOverReplicasAndResumesExactly) {
  std::unique_ptr<DistData> one = Make(Spec(1)), two = Make(Spec(2)), again = Make(Spec(2));
  ASSERT_TRUE(one && two && again);
  EXPECT_EQ(two->replicas(), 2);
  data::DataPosition after_two;
  for (int step = 1; step <= 4; ++step) {
    absl::StatusOr<DistBatch> a = one->Next(step), b = two->Next(step);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_EQ(a->batches.size(), 1u);
    ASSERT_EQ(b->batches.size(), 2u);
    EXPECT_EQ(a->samples, 4);
    EXPECT_EQ(b->samples, 4);
    // The same draws: the replicas' shares add up to the one-replica batch.
    EXPECT_EQ(a->tokens, b->tokens) << "step " << step;
    EXPECT_EQ(a->image_tokens, b->image_tokens);
    EXPECT_EQ(a->loss_tokens, b->loss_tokens);
    EXPECT_GT(b->image_tokens, 0);
    for (const std::vector<PackedBatch>& replica : b->batches) {
      ASSERT_EQ(replica.size(), 1u);  // no micro_batch_size: one micro-batch per replica
      const PackedBatch& p = replica[0];
      EXPECT_EQ(p.cu_seqlens.size(), 3u);  // two samples per replica
      EXPECT_EQ(p.image_grids.size(), 2u);
      EXPECT_EQ(p.position_ids.size(0), 3);
    }
    if (step == 2) after_two = two->position();
  }
  EXPECT_EQ(two->position().epoch, 1);  // 16 draws of a 10-sample epoch
  // Seek reproduces steps 3-4 bit for bit.
  again->Seek(after_two);
  std::unique_ptr<DistData> ref = Make(Spec(2));
  for (int step = 1; step <= 4; ++step) {
    absl::StatusOr<DistBatch> r = ref->Next(step);
    ASSERT_TRUE(r.ok());
    if (step < 3) continue;
    absl::StatusOr<DistBatch> s = again->Next(step);
    ASSERT_TRUE(s.ok());
    for (int d = 0; d < 2; ++d) {
      EXPECT_TRUE(at::equal(s->batches[d][0].input_ids, r->batches[d][0].input_ids));
      EXPECT_TRUE(at::equal(s->batches[d][0].pixel_values, r->batches[d][0].pixel_values));
      EXPECT_TRUE(at::equal(s->batches[d][0].position_ids, r->batches[d][0].position_ids));
    }
  }
}

// training.micro_batch_size splits each replica's share, in draw order, into micro-batches of
// that many samples: the same samples and counts (tokens for tokens/s included) as one packed
// sequence per replica.
// A rank builds only its replica (issue 13 §5): replica r's DistData gives exactly the
// micro-batches the all-replica one gives for r, placeholders for the others, counters that add
// up over the replicas to the global batch's, the same stream position, and resumes exactly.
TEST_F(DistDataTest, EachReplicaBuildsOnlyItsOwnSamplesAndTheyAddUpToTheGlobalBatch) {
  v1::JobSpec spec = Spec(2);
  spec.mutable_training()->set_micro_batch_size(1);  // two micro-batches per replica
  std::unique_ptr<DistData> all = Make(spec), r0 = Make(spec, 0), r1 = Make(spec, 1);
  ASSERT_TRUE(all && r0 && r1);
  EXPECT_EQ(r1->replica(), 1);
  data::DataPosition after2;
  std::vector<DistBatch> step3;
  for (int step = 1; step <= 3; ++step) {
    absl::StatusOr<DistBatch> a = all->Next(step), b0 = r0->Next(step), b1 = r1->Next(step);
    ASSERT_TRUE(a.ok() && b0.ok() && b1.ok()) << a.status() << b0.status() << b1.status();
    const DistBatch* mine[2] = {&*b0, &*b1};
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(mine[r]->batches.size(), 2u);
      for (int other = 0; other < 2; ++other) {
        ASSERT_EQ(mine[r]->batches[other].size(), 2u) << "every replica keeps n places";
        for (int k = 0; k < 2; ++k) {
          const PackedBatch& got = mine[r]->batches[other][k];
          if (other != r) {
            EXPECT_FALSE(got.input_ids.defined()) << "replica " << r << " built replica " << other;
            continue;
          }
          const PackedBatch& want = a->batches[r][k];
          EXPECT_TRUE(at::equal(got.input_ids, want.input_ids)) << "step " << step;
          EXPECT_TRUE(at::equal(got.pixel_values, want.pixel_values)) << "step " << step;
          EXPECT_EQ(got.image_grids.size(), want.image_grids.size());
        }
      }
    }
    EXPECT_EQ(b0->samples + b1->samples, a->samples);
    EXPECT_EQ(b0->tokens + b1->tokens, a->tokens);
    EXPECT_EQ(b0->image_tokens + b1->image_tokens, a->image_tokens);
    EXPECT_EQ(b0->loss_tokens + b1->loss_tokens, a->loss_tokens);
    EXPECT_EQ(b0->patches + b1->patches, a->patches);
    EXPECT_EQ(b0->samples, 2);  // its share only
    EXPECT_EQ(r0->position().offset, all->position().offset);
    EXPECT_EQ(r1->position().epoch, all->position().epoch);
    if (step == 2) after2 = r1->position();
    if (step == 3) step3.push_back(*std::move(b1));
  }
  std::unique_ptr<DistData> resumed = Make(spec, 1);
  ASSERT_TRUE(resumed);
  resumed->Seek(after2);
  absl::StatusOr<DistBatch> again = resumed->Next(3);
  ASSERT_TRUE(again.ok()) << again.status();
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(at::equal(again->batches[1][k].input_ids, step3[0].batches[1][k].input_ids));
  }
  absl::StatusOr<std::unique_ptr<DistData>> bad =
      DistData::Create(spec, *FindModelPreset("tiny"), DataPipelineOptions{}, at::kCPU, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("replica 2 is outside [0, 2)"));
}

TEST_F(DistDataTest, MicroBatchesSplitEachShareInOrderAndCountEverySample) {
  v1::JobSpec spec = Spec(2);
  spec.mutable_training()->set_batch_size(8);
  spec.mutable_training()->set_micro_batch_size(4);
  std::unique_ptr<DistData> whole = Make(spec);
  spec.mutable_training()->set_micro_batch_size(2);
  std::unique_ptr<DistData> halves = Make(spec);
  spec.mutable_training()->set_micro_batch_size(1);
  std::unique_ptr<DistData> singles = Make(spec);
  ASSERT_TRUE(whole && halves && singles);
  EXPECT_EQ(halves->micro_batch_size(), 2);
  for (int step = 1; step <= 2; ++step) {
    absl::StatusOr<DistBatch> w = whole->Next(step), h = halves->Next(step),
                              s = singles->Next(step);
    ASSERT_TRUE(w.ok() && h.ok() && s.ok()) << w.status() << h.status() << s.status();
    for (const DistBatch* b : {&*w, &*h, &*s}) {
      EXPECT_EQ(b->samples, 8);
      EXPECT_EQ(b->tokens, w->tokens) << "step " << step;
      EXPECT_EQ(b->image_tokens, w->image_tokens);
      EXPECT_EQ(b->loss_tokens, w->loss_tokens);
      EXPECT_EQ(b->patches, w->patches);
      ASSERT_EQ(b->batches.size(), 2u);
    }
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(w->batches[d].size(), 1u);
      ASSERT_EQ(h->batches[d].size(), 2u);
      ASSERT_EQ(s->batches[d].size(), 4u);
      // The micro-batches, in order, are the whole share's samples.
      std::vector<at::Tensor> ids, pixels;
      int64_t tokens = 0;
      for (const PackedBatch& p : h->batches[d]) {
        EXPECT_EQ(p.cu_seqlens.size(), 3u);  // two samples each
        ids.push_back(p.input_ids);
        pixels.push_back(p.pixel_values);
        tokens += p.input_ids.numel();
      }
      EXPECT_TRUE(at::equal(at::cat(ids), w->batches[d][0].input_ids));
      EXPECT_TRUE(at::equal(at::cat(pixels), w->batches[d][0].pixel_values));
      EXPECT_EQ(tokens, w->batches[d][0].input_ids.numel());
      for (const PackedBatch& p : s->batches[d]) EXPECT_EQ(p.cu_seqlens.size(), 2u);
    }
  }
}

TEST_F(DistDataTest, AShareThatDoesNotFitOnePackedSequenceSaysWhatToChange) {
  std::unique_ptr<DistData> probe = Make(Spec(1));
  ASSERT_TRUE(probe);
  absl::StatusOr<DistBatch> first = probe->Next(1);
  ASSERT_TRUE(first.ok());
  v1::JobSpec spec = Spec(1);
  spec.mutable_data()->set_max_seq_len(static_cast<int>(first->tokens) - 1);
  std::unique_ptr<DistData> tight = Make(spec);
  ASSERT_TRUE(tight);
  absl::StatusOr<DistBatch> b = tight->Next(1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("step 1: micro-batch 1 of 1 of data-parallel replica 0 (4 samples, " +
                        std::to_string(first->tokens) + " tokens) does not fit one packed "
                        "sequence of data.max_seq_len = " + std::to_string(first->tokens - 1)));
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("raise data.max_seq_len to at least " + std::to_string(first->tokens) +
                        ", or lower training.micro_batch_size (4 samples per micro-batch"));
  // Two micro-batches of two samples each fit.
  spec.mutable_training()->set_micro_batch_size(2);
  std::unique_ptr<DistData> halves = Make(spec);
  ASSERT_TRUE(halves);
  absl::StatusOr<DistBatch> h = halves->Next(1);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->tokens, first->tokens);
}

TEST_F(DistDataTest, ABatchSmallerThanTheReplicasIsRefused) {
  v1::JobSpec spec = Spec(2);
  spec.mutable_training()->set_batch_size(1);
  DataPipelineOptions o;
  o.data_root = Root();
  absl::StatusOr<std::unique_ptr<DistData>> d =
      DistData::Create(spec, *FindModelPreset("tiny"), o, at::kCPU);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("training.batch_size 1"));
}

}  // namespace
}  // namespace dhp
