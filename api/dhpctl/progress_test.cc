#include "api/dhpctl/progress.h"

#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace dhp::dhpctl {
namespace {

v1::Job RunningJob(int64_t step, int64_t total) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_latest_step(step);
  job.set_total_steps(total);
  return job;
}

TEST(ProgressTest, HumanCountSuffixes) {
  EXPECT_EQ(HumanCount(0), "0");
  EXPECT_EQ(HumanCount(950), "950");
  EXPECT_EQ(HumanCount(999.4), "999");
  EXPECT_EQ(HumanCount(999.6), "1.0k");
  EXPECT_EQ(HumanCount(1234), "1.2k");
  EXPECT_EQ(HumanCount(9960), "10k");
  EXPECT_EQ(HumanCount(12345), "12k");
  EXPECT_EQ(HumanCount(340'000), "340k");
  EXPECT_EQ(HumanCount(999'600), "1.0M");
  EXPECT_EQ(HumanCount(3.4e6), "3.4M");
  EXPECT_EQ(HumanCount(5e9), "5.0G");
  EXPECT_EQ(HumanCount(-1500), "-1.5k");
}

TEST(ProgressTest, ClockDuration) {
  EXPECT_EQ(ClockDuration(0), "0:00");
  EXPECT_EQ(ClockDuration(32), "0:32");
  EXPECT_EQ(ClockDuration(31.6), "0:32");
  EXPECT_EQ(ClockDuration(725), "12:05");
  EXPECT_EQ(ClockDuration(3723), "1:02:03");
  EXPECT_EQ(ClockDuration(100 * 3600), "100:00:00");
  EXPECT_EQ(ClockDuration(-1), "-");
}

TEST(ProgressTest, Bar) {
  EXPECT_EQ(ProgressBar(0, 10), "[..........]");
  EXPECT_EQ(ProgressBar(0.6, 10), "[######....]");
  EXPECT_EQ(ProgressBar(0.65, 10), "[######....]");
  EXPECT_EQ(ProgressBar(1, 10), "[##########]");
  EXPECT_EQ(ProgressBar(1.5, 4), "[####]");
  EXPECT_EQ(ProgressBar(-1, 4), "[....]");
}

TEST(ProgressTest, FullLine) {
  v1::Job job = RunningJob(120, 200);
  job.set_latest_loss(3.21449);
  job.set_tokens_per_second(1234);
  job.set_step_seconds(0.4);
  EXPECT_EQ(ProgressLine(job),
            "step 120/200 [############........] 60%  loss 3.214  1.2k tok/s  ETA 0:32");
  EXPECT_DOUBLE_EQ(ProgressFraction(job), 0.6);
}

TEST(ProgressTest, LineLeavesOutWhatIsUnknown) {
  EXPECT_EQ(ProgressLine(RunningJob(0, 200)), "step 0/200 [....................] 0%");
  v1::Job job = RunningJob(7, 0);  // total unknown: no bar, no ETA
  job.set_latest_loss(2.5);
  job.set_step_seconds(1);
  EXPECT_EQ(ProgressLine(job), "step 7  loss 2.5");
  EXPECT_EQ(ProgressFraction(job), 0);
  job = RunningJob(200, 200);
  job.set_latest_loss(0.012346);
  job.set_tokens_per_second(2.5e6);
  job.set_step_seconds(3);
  EXPECT_EQ(ProgressLine(job),
            "step 200/200 [####################] 100%  loss 0.01235  2.5M tok/s  ETA 0:00");
  job = RunningJob(100, 8000);
  job.set_latest_loss(1);
  job.set_step_seconds(1.5);
  EXPECT_EQ(ProgressLine(job),
            "step 100/8000 [....................] 1%  loss 1  ETA 3:17:30");
}

TEST(ProgressTest, FinalSummaryNamesNewestCompleteCheckpoint) {
  v1::GetJobResponse resp;
  *resp.mutable_job() = RunningJob(200, 200);
  resp.mutable_job()->set_state(v1::JOB_STATE_SUCCEEDED);
  resp.mutable_job()->set_message("all steps done");
  resp.mutable_job()->set_latest_loss(1.23449);
  EXPECT_EQ(FinalSummary(resp),
            "job j-1 ended SUCCEEDED: all steps done\n"
            "  steps:       200/200, final loss 1.234\n"
            "  checkpoint:  none\n"
            "next: dhpctl logs j-1, dhpctl checkpoints j-1, dhpctl get j-1\n");
  const std::vector<std::pair<int64_t, v1::CheckpointState>> ckpts = {
      {100, v1::CHECKPOINT_STATE_COMPLETE},
      {200, v1::CHECKPOINT_STATE_CORRUPT},
      {150, v1::CHECKPOINT_STATE_COMPLETE},
      {190, v1::CHECKPOINT_STATE_PARTIAL}};
  for (const auto& [step, state] : ckpts) {
    v1::Checkpoint* c = resp.add_checkpoints();
    c->set_step(step);
    c->set_state(state);
    c->set_path("/ckpt/j-1/step-" + std::to_string(step));
  }
  const std::string summary = FinalSummary(resp);
  EXPECT_NE(summary.find("  checkpoint:  step 150, /ckpt/j-1/step-150\n"), std::string::npos)
      << summary;

  v1::GetJobResponse cancelled;
  cancelled.mutable_job()->set_id("j-2");
  cancelled.mutable_job()->set_state(v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(FinalSummary(cancelled),
            "job j-2 ended CANCELLED\n"
            "  steps:       0\n"
            "  checkpoint:  none\n"
            "next: dhpctl logs j-2, dhpctl checkpoints j-2, dhpctl get j-2\n");
}

TEST(ProgressConsoleTest, TerminalRedrawsOneLineAndClearsItForEvents) {
  std::ostringstream out;
  ProgressConsole console(out, /*tty=*/true);
  console.Progress("step 1/10", 0.1, 1);
  console.Progress("step 1/10", 0.1, 2);  // unchanged: nothing written
  console.Progress("step 2/10", 0.2, 3);
  console.Line("event A");
  console.Progress("step 3/10", 0.3, 4);
  console.Clear();
  console.Line("done");
  EXPECT_EQ(out.str(),
            "\rstep 1/10\033[K"
            "\rstep 2/10\033[K"
            "\r\033[Kevent A\n\rstep 2/10\033[K"
            "\rstep 3/10\033[K"
            "\r\033[K"
            "done\n");
}

TEST(ProgressConsoleTest, TerminalCutsLinesToItsWidth) {
  std::ostringstream out;
  ProgressConsole console(out, /*tty=*/true, /*width=*/8);
  console.Progress("step 100/200 [###]", 0.5, 1);
  EXPECT_EQ(out.str(), "\rstep 10\033[K");
}

TEST(ProgressConsoleTest, PipePrintsEvery5sOrAtEach10Percent) {
  std::ostringstream out;
  ProgressConsole console(out, /*tty=*/false);
  const int64_t s = 1'000'000;
  console.Progress("step 1/100", 0.01, 100 * s);   // first: printed
  console.Progress("step 2/100", 0.02, 101 * s);   // too soon
  console.Progress("step 3/100", 0.03, 105 * s);   // 5 s later: printed
  console.Progress("step 10/100", 0.10, 106 * s);  // crosses 10%: printed
  console.Progress("step 11/100", 0.11, 107 * s);  // too soon
  console.Line("event");                           // plain line, no escapes
  console.Progress("step 11/100", 0.11, 120 * s);  // 5 s since the last print: printed
  console.Progress("step 25/100", 0.25, 121 * s);  // crosses 20%: printed
  console.Clear();                                 // nothing to clear in a pipe
  EXPECT_EQ(out.str(),
            "step 1/100\n"
            "step 3/100\n"
            "step 10/100\n"
            "event\n"
            "step 11/100\n"
            "step 25/100\n");
}

}  // namespace
}  // namespace dhp::dhpctl
