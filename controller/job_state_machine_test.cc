#include "controller/job_state_machine.h"

#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::HasSubstr;
using v1::JobState;

constexpr JobState kUnspecified = v1::JOB_STATE_UNSPECIFIED;
constexpr JobState kQueued = v1::JOB_STATE_QUEUED;
constexpr JobState kScheduled = v1::JOB_STATE_SCHEDULED;
constexpr JobState kStarting = v1::JOB_STATE_STARTING;
constexpr JobState kRunning = v1::JOB_STATE_RUNNING;
constexpr JobState kRestarting = v1::JOB_STATE_RESTARTING;
constexpr JobState kCancelling = v1::JOB_STATE_CANCELLING;
constexpr JobState kCancelled = v1::JOB_STATE_CANCELLED;
constexpr JobState kSucceeded = v1::JOB_STATE_SUCCEEDED;
constexpr JobState kFailed = v1::JOB_STATE_FAILED;

// Written out independently of the implementation: every legal (from, to) pair.
const std::set<std::pair<JobState, JobState>>& Legal() {
  static const auto* legal = new std::set<std::pair<JobState, JobState>>{
      {kQueued, kScheduled},     {kQueued, kCancelled},       {kQueued, kFailed},
      {kScheduled, kStarting},   {kScheduled, kCancelling},   {kScheduled, kFailed},
      {kScheduled, kQueued},     {kScheduled, kRestarting},   {kStarting, kRunning},       {kStarting, kCancelling},
      {kStarting, kFailed},      {kStarting, kRestarting},    {kRunning, kSucceeded},
      {kRunning, kFailed},       {kRunning, kCancelling},     {kRunning, kRestarting},
      {kRestarting, kQueued},    {kRestarting, kCancelling},  {kRestarting, kFailed},
      {kCancelling, kCancelled}, {kCancelling, kFailed},      {kCancelled, kQueued},
      {kFailed, kQueued},
  };
  return *legal;
}

TEST(JobStateMachineTest, EveryPairMatchesTheTable) {
  ASSERT_EQ(v1::JobState_descriptor()->value_count(), 10);
  int legal_seen = 0;
  for (int f = 0; f < v1::JobState_descriptor()->value_count(); ++f) {
    for (int t = 0; t < v1::JobState_descriptor()->value_count(); ++t) {
      const auto from = static_cast<JobState>(v1::JobState_descriptor()->value(f)->number());
      const auto to = static_cast<JobState>(v1::JobState_descriptor()->value(t)->number());
      const absl::Status status = CheckJobTransition(from, to);
      SCOPED_TRACE(v1::JobState_Name(from) + " -> " + v1::JobState_Name(to));
      if (Legal().count({from, to}) > 0) {
        EXPECT_TRUE(status.ok()) << status;
        ++legal_seen;
      } else {
        EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
        // Every refusal names both states by their short names.
        EXPECT_THAT(std::string(status.message()),
                    HasSubstr("job cannot go from " + v1::JobState_Name(from).substr(10) +
                              " to " + v1::JobState_Name(to).substr(10) + ": "));
      }
    }
  }
  EXPECT_EQ(legal_seen, 23);
}

TEST(JobStateMachineTest, ErrorMessages) {
  EXPECT_EQ(CheckJobTransition(kSucceeded, kQueued).message(),
            "job cannot go from SUCCEEDED to QUEUED: SUCCEEDED is final");
  EXPECT_EQ(CheckJobTransition(kRunning, kQueued).message(),
            "job cannot go from RUNNING to QUEUED: allowed from RUNNING: SUCCEEDED, FAILED, "
            "CANCELLING, RESTARTING");
  EXPECT_EQ(CheckJobTransition(kQueued, kRunning).message(),
            "job cannot go from QUEUED to RUNNING: allowed from QUEUED: SCHEDULED, CANCELLED, "
            "FAILED");
  EXPECT_EQ(CheckJobTransition(kCancelled, kRunning).message(),
            "job cannot go from CANCELLED to RUNNING: allowed from CANCELLED: QUEUED");
  EXPECT_EQ(CheckJobTransition(kRunning, kRunning).message(),
            "job cannot go from RUNNING to RUNNING: it is already RUNNING");
  EXPECT_THAT(std::string(CheckJobTransition(kRunning, kUnspecified).message()),
              HasSubstr("from RUNNING to UNSPECIFIED"));
  EXPECT_THAT(std::string(CheckJobTransition(kUnspecified, kQueued).message()),
              HasSubstr("job cannot go from UNSPECIFIED to QUEUED: UNSPECIFIED is not a job"));
}

TEST(JobStateMachineTest, UnknownEnumValuesAreRefused) {
  const auto unknown = static_cast<JobState>(42);
  EXPECT_EQ(CheckJobTransition(unknown, kQueued).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckJobTransition(kQueued, unknown).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JobStateMachineTest, IsTerminal) {
  const std::set<JobState> terminal = {kCancelled, kSucceeded, kFailed};
  for (int i = 0; i < v1::JobState_descriptor()->value_count(); ++i) {
    const auto state = static_cast<JobState>(v1::JobState_descriptor()->value(i)->number());
    EXPECT_EQ(IsTerminal(state), terminal.count(state) > 0) << v1::JobState_Name(state);
  }
}

TEST(JobStateMachineTest, CancelTargetForEveryState) {
  struct Case {
    JobState from;
    bool ok;
    JobState to;          // when ok
    std::string message;  // when not ok
  };
  const Case cases[] = {
      {kUnspecified, false, kUnspecified, "job in state UNSPECIFIED cannot be cancelled"},
      {kQueued, true, kCancelled, ""},
      {kScheduled, true, kCancelling, ""},
      {kStarting, true, kCancelling, ""},
      {kRunning, true, kCancelling, ""},
      {kRestarting, true, kCancelling, ""},
      {kCancelling, false, kUnspecified, "job is already being cancelled"},
      {kCancelled, false, kUnspecified, "job is already CANCELLED; there is nothing to cancel"},
      {kSucceeded, false, kUnspecified, "job is already SUCCEEDED; there is nothing to cancel"},
      {kFailed, false, kUnspecified, "job is already FAILED; there is nothing to cancel"},
  };
  ASSERT_EQ(std::size(cases), 10u);
  for (const Case& c : cases) {
    SCOPED_TRACE(v1::JobState_Name(c.from));
    JobState to = kUnspecified;
    const absl::Status status = CancelTarget(c.from, &to);
    if (c.ok) {
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(to, c.to);
      // The target is always a legal transition from where the job is.
      EXPECT_TRUE(CheckJobTransition(c.from, to).ok());
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(status.message(), c.message);
      EXPECT_EQ(to, kUnspecified) << "output must be untouched on failure";
    }
  }
}

TEST(JobStateMachineTest, CheckResumableForEveryState) {
  for (int i = 0; i < v1::JobState_descriptor()->value_count(); ++i) {
    const auto state = static_cast<JobState>(v1::JobState_descriptor()->value(i)->number());
    SCOPED_TRACE(v1::JobState_Name(state));
    const absl::Status status = CheckResumable(state);
    if (state == kCancelled || state == kFailed) {
      EXPECT_TRUE(status.ok()) << status;
      EXPECT_TRUE(CheckJobTransition(state, kQueued).ok());  // resume goes to QUEUED
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr("only CANCELLED or FAILED jobs can be resumed; job is " +
                            v1::JobState_Name(state).substr(10)));
    }
  }
  EXPECT_EQ(CheckResumable(kRunning).message(),
            "only CANCELLED or FAILED jobs can be resumed; job is RUNNING");
  EXPECT_THAT(std::string(CheckResumable(kSucceeded).message()), HasSubstr("it completed"));
}

}  // namespace
}  // namespace dhp::controller
