// WatchJob through the Controller: replay of a job's or everyone's history, following until the
// job is final, a refusing sink, a client that goes away, and Stop ending open streams.
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "controller/controller_test_fixture.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using namespace std::chrono_literals;

class ControllerWatchTest : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    StartController();
  }
};

TEST_F(ControllerWatchTest, WatchWithoutFollowReplaysTheHistory) {
  const v1::Job a = Submit();
  const v1::Job b = Submit();
  ASSERT_TRUE(Cancel(a.id()).ok());

  std::vector<v1::Event> events = Replay(a.id());
  EXPECT_EQ(Rows(events), (std::vector<EventRow>{
                              {"job.state", "", "QUEUED", "submitted"},
                              {"job.state", "QUEUED", "CANCELLED", "cancelled by user"},
                              {"run.state", "PENDING", "CANCELLED", "cancelled by user"},
                          }));
  ASSERT_EQ(events.size(), 3u);
  for (const v1::Event& e : events) EXPECT_EQ(e.job_id(), a.id());
  std::vector<EventRow> rest = Rows(events);
  rest.erase(rest.begin());
  EXPECT_EQ(Rows(Replay(a.id(), events[0].id())), rest);

  std::vector<v1::Event> all = Replay("");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1].job_id(), b.id());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].id(), static_cast<int64_t>(i + 1));

  v1::WatchJobRequest req;
  req.set_job_id("j-missing");
  CollectingSink sink;
  absl::Status s = controller_->WatchJob(req, sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job j-missing not found");
}

// Found by schemathesis (GET /v1/events?after=-1 was a 200).
TEST_F(ControllerWatchTest, WatchRefusesANegativeAfter) {
  v1::WatchJobRequest req;
  req.set_after_event_id(-1);
  CollectingSink sink;
  const absl::Status s = controller_->WatchJob(req, sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "after_event_id: -1 is negative; event ids start at 1 (0: from the first)");
  EXPECT_TRUE(sink.events().empty());
}

TEST_F(ControllerWatchTest, WatchStopsWhenTheSinkRefusesAWrite) {
  const v1::Job job = Submit();
  ASSERT_TRUE(Cancel(job.id()).ok());
  CollectingSink sink(/*write_limit=*/1);
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  req.set_follow(true);
  EXPECT_TRUE(controller_->WatchJob(req, sink).ok());
  EXPECT_EQ(sink.events().size(), 1u);
}

TEST_F(ControllerWatchTest, FollowingAJobStreamsEventsAndEndsWhenItIsFinal) {
  const v1::Job job = Submit();
  CollectingSink sink;
  std::future<absl::Status> watch = WatchAsync(job.id(), /*follow=*/true, sink);
  ASSERT_TRUE(sink.WaitFor(1));  // the history
  EXPECT_EQ(watch.wait_for(100ms), std::future_status::timeout);  // still following

  ASSERT_TRUE(Cancel(job.id()).ok());
  EXPECT_TRUE(Await(watch).ok());
  EXPECT_EQ(Rows(sink.events()), (std::vector<EventRow>{
                                     {"job.state", "", "QUEUED", "submitted"},
                                     {"job.state", "QUEUED", "CANCELLED", "cancelled by user"},
                                     {"run.state", "PENDING", "CANCELLED", "cancelled by user"},
                                 }));
}

TEST_F(ControllerWatchTest, FollowingEverythingReturnsWhenTheClientGoesAway) {
  CollectingSink sink;
  std::future<absl::Status> watch = WatchAsync("", /*follow=*/true, sink);
  const v1::Job job = Submit();
  ASSERT_TRUE(sink.WaitFor(1));
  ASSERT_TRUE(Register("n1").ok());
  ASSERT_TRUE(sink.WaitFor(2));
  EXPECT_EQ(watch.wait_for(100ms), std::future_status::timeout);

  const auto start = std::chrono::steady_clock::now();
  sink.Cancel();
  EXPECT_TRUE(Await(watch).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // polls IsCancelled twice a second
  std::vector<v1::Event> events = sink.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].job_id(), job.id());
  EXPECT_EQ(Rows({events[0]})[0], EventRow("job.state", "", "QUEUED", "submitted"));
  EXPECT_EQ(events[1].node_id(), "n1");
  EXPECT_EQ(Rows({events[1]})[0], EventRow("node.state", "", "READY", "registered"));
  // The new node's slots let the scheduler place the job at once.
  EXPECT_EQ(events[2].type() + " " + events[2].to_state(), "run.state STARTING");
  EXPECT_EQ(events[3].type() + " " + events[3].to_state(), "job.state SCHEDULED");
  EXPECT_EQ(events[3].job_id(), job.id());
}

// Admission with the memory planner: a job whose ranks need more memory than any registered GPU
// has is refused at submit with the per-rank breakdown, and nothing of it is stored; on GPUs that
// hold it, it is placed.
TEST_F(ControllerWatchTest, StopEndsOpenWatchStreams) {
  const v1::Job job = Submit();
  CollectingSink job_sink, all_sink;
  std::future<absl::Status> job_watch = WatchAsync(job.id(), /*follow=*/true, job_sink);
  std::future<absl::Status> all_watch = WatchAsync("", /*follow=*/true, all_sink);
  ASSERT_TRUE(job_sink.WaitFor(1));
  ASSERT_TRUE(all_sink.WaitFor(1));
  controller_->Stop();
  for (std::future<absl::Status>* watch : {&job_watch, &all_watch}) {
    ASSERT_EQ(watch->wait_for(2s), std::future_status::ready);
    absl::Status s = watch->get();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(s.message(), "the controller is shutting down");
  }
}


}  // namespace
}  // namespace dhp::controller
