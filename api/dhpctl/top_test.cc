#include "api/dhpctl/top.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dhp::dhpctl {
namespace {

v1::GetJobResponse Running() {
  v1::GetJobResponse resp;
  v1::Job* job = resp.mutable_job();
  job->set_id("j-1a2b3c4d5e6f");
  job->mutable_spec()->set_name("tiny-cpu");
  job->set_state(v1::JOB_STATE_RUNNING);
  job->set_current_attempt(2);
  job->set_restart_count(1);
  job->set_latest_step(119);
  job->set_latest_loss(3.2141);
  job->set_total_steps(200);
  job->set_tokens_per_second(1234);
  job->set_step_seconds(0.5);

  v1::RankProgress* r0 = resp.add_ranks();
  r0->set_rank(0);
  r0->set_node_id("node-a");
  r0->set_step(120);
  r0->set_report_age_seconds(0.4);
  r0->set_has_vision(true);
  r0->set_has_text(true);
  auto& m0 = *r0->mutable_metrics();
  m0["vision_tokens_per_s"] = 400;
  m0["text_tokens_per_s"] = 1200;
  m0["forward_s"] = 0.101;
  m0["backward_s"] = 0.205;
  m0["comm_s"] = 0.0052;
  m0["optimizer_s"] = 0.021;
  m0["memory_rss_bytes"] = 300 * 1048576.0;
  m0["lr"] = 0.001;
  m0["grad_norm"] = 0.8213;

  v1::RankProgress* r1 = resp.add_ranks();
  r1->set_rank(1);
  r1->set_node_id("node-b");
  r1->set_step(119);
  r1->set_report_age_seconds(12.4);
  r1->set_has_text(true);
  auto& m1 = *r1->mutable_metrics();
  m1["text_tokens_per_s"] = 1100;
  m1["text_forward_s"] = 0.2;
  m1["vision_forward_s"] = 0.1;
  m1["memory_allocated_bytes"] = 1024 * 1048576.0;
  m1["memory_peak_bytes"] = 2048 * 1048576.0;
  m1["backward_s"] = NAN;
  m1["mfu_text"] = 0.415;

  v1::RankProgress* r2 = resp.add_ranks();
  r2->set_rank(2);
  r2->set_node_id("node-b");
  r2->set_step(-1);
  r2->set_has_vision(true);
  r2->set_waiting_on("");
  return resp;
}

TEST(TopTest, HeaderShowsTheJobAndItsProgress) {
  EXPECT_EQ(TopHeader(Running()),
            "job j-1a2b3c4d5e6f  tiny-cpu  RUNNING  attempt 2  restarts 1\n"
            "step 120/200 (60%)  loss 3.214  lr 0.001  grad norm 0.821  1.2k tok/s  0.5 s/step"
            "  ETA 0:40\n");
}

TEST(TopTest, ARowPerRank) {
  const std::string view = TopView(Running());
  EXPECT_EQ(view,
            "job j-1a2b3c4d5e6f  tiny-cpu  RUNNING  attempt 2  restarts 1\n"
            "step 120/200 (60%)  loss 3.214  lr 0.001  grad norm 0.821  1.2k tok/s  0.5 s/step"
            "  ETA 0:40\n"
            "\n"
            "RANK  NODE    STAGES       STEP  TOK/S V/T  FWD ms  BWD ms  COMM ms  OPT ms  "
            "MEM MiB    MFU V/T  WAITING\n"
            "0     node-a  vision+text  120   400/1.2k   101     205     5.2      21      "
            "300 rss    -        -\n"
            "1     node-b  text         119   -/1.1k     300     -       -        -       "
            "1024/2048  -/41.5%  silent for 12 s\n"
            "2     node-b  vision       -     -          -       -       -        -       "
            "-          -        not reported yet\n");
}

TEST(TopTest, TheWatchdogsWordsWinAndLinesAreCut) {
  v1::GetJobResponse resp = Running();
  resp.mutable_ranks(1)->set_waiting_on("all_reduce on group text.tp0 (call 57) for 31 s");
  const std::string view = TopView(resp);
  EXPECT_NE(view.find("1024/2048  -/41.5%  all_reduce on group text.tp0 (call 57) for 31 s\n"),
            std::string::npos)
      << view;
  const std::string cut = TopView(resp, 20);
  size_t start = 0;
  int lines = 0;
  while (start < cut.size()) {
    size_t end = cut.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    EXPECT_LE(end - start, 20u) << cut;
    start = end + 1;
    ++lines;
  }
  EXPECT_EQ(lines, 7);
}

TEST(TopTest, AJobWithoutRanksSaysWhy) {
  v1::GetJobResponse resp;
  resp.mutable_job()->set_id("j-1");
  resp.mutable_job()->set_state(v1::JOB_STATE_QUEUED);
  resp.mutable_job()->set_current_attempt(1);
  resp.mutable_job()->set_message("waiting for 2 free CPU slots (cluster has 1 free)");
  EXPECT_EQ(TopView(resp),
            "job j-1  QUEUED  attempt 1  restarts 0\n"
            "step 0\n"
            "\n"
            "no ranks placed: waiting for 2 free CPU slots (cluster has 1 free)\n");
}

TEST(TopTest, NoEtaOnceTheJobHasEnded) {
  v1::GetJobResponse resp = Running();
  resp.mutable_job()->set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(TopHeader(resp).find("ETA"), std::string::npos);
}

TEST(TopTest, ParseInterval) {
  EXPECT_EQ(ParseInterval("1s"), 1000);
  EXPECT_EQ(ParseInterval("2"), 2000);
  EXPECT_EQ(ParseInterval("1.5s"), 1500);
  EXPECT_EQ(ParseInterval("500ms"), 500);
  EXPECT_EQ(ParseInterval("1m"), 60000);
  EXPECT_EQ(ParseInterval(""), std::nullopt);
  EXPECT_EQ(ParseInterval("fast"), std::nullopt);
  EXPECT_EQ(ParseInterval("1h"), std::nullopt);
  EXPECT_EQ(ParseInterval("0"), std::nullopt);
  EXPECT_EQ(ParseInterval("-1s"), std::nullopt);
}

}  // namespace
}  // namespace dhp::dhpctl
