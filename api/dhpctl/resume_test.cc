// Tests the request `dhpctl resume` sends: flags not given stay unset (the job's layout is
// kept), given ones are sent as typed, placement is spelled as in a spec.
#include "api/dhpctl/resume.h"

#include "gtest/gtest.h"

namespace dhp::dhpctl {
namespace {

TEST(ResumeRequestTest, NoFlagsKeepTheJobsLayout) {
  absl::StatusOr<v1::ResumeJobRequest> req = ResumeRequest("j-1", ResumeLayoutFlags());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->job_id(), "j-1");
  EXPECT_FALSE(req->has_vision_degree());
  EXPECT_FALSE(req->has_text_degree());
  EXPECT_FALSE(req->has_data_parallel_size());
  EXPECT_EQ(req->placement(), v1::PLACEMENT_UNSPECIFIED);
}

TEST(ResumeRequestTest, GivenFlagsAreSentAsTyped) {
  ResumeLayoutFlags flags;
  flags.vision_degree = 4;
  flags.text_degree = 2;
  flags.data_parallel_size = 0;  // sent: the controller refuses it, naming the field
  flags.placement = "separate";
  absl::StatusOr<v1::ResumeJobRequest> req = ResumeRequest("j-2", flags);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->vision_degree(), 4);
  EXPECT_EQ(req->text_degree(), 2);
  ASSERT_TRUE(req->has_data_parallel_size());
  EXPECT_EQ(req->data_parallel_size(), 0);
  EXPECT_EQ(req->placement(), v1::PLACEMENT_SEPARATE);

  flags = ResumeLayoutFlags();
  flags.placement = "Collocate";  // any case, as in a spec
  req = ResumeRequest("j-2", flags);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->placement(), v1::PLACEMENT_COLLOCATE);
  EXPECT_FALSE(req->has_text_degree());
}

TEST(ResumeRequestTest, APlacementThatIsNoneOfTheSpecsIsRefused) {
  for (const char* bad : {"collocated", "unspecified", "0", "both"}) {
    ResumeLayoutFlags flags;
    flags.placement = bad;
    absl::StatusOr<v1::ResumeJobRequest> req = ResumeRequest("j-3", flags);
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(req.status().message(), std::string("--placement ") + bad +
                                          ": use one of collocate, separate (as a spec's "
                                          "placement)");
  }
}

}  // namespace
}  // namespace dhp::dhpctl
