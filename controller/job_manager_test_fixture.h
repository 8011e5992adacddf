// The JobManager test fixture, shared by job_manager_test.cc (submit, get, list, cancel, resume,
// events) and job_manager_relayout_test.cc (resume on a new layout): an in-memory Store, a
// FakeClock, specs for the tiny model, and snapshots of everything stored about a job.
#ifndef DHP_CONTROLLER_JOB_MANAGER_TEST_FIXTURE_H_
#define DHP_CONTROLLER_JOB_MANAGER_TEST_FIXTURE_H_

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "controller/job_manager.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {

inline constexpr char kRoot[] = "/data/checkpoints";

// A valid spec for the tiny model, with a name and a team label.
inline std::string SpecYaml(const std::string& name, const std::string& team = "vision") {
  return "name: " + name + "\nlabels: {team: " + team + "}\nmodel: {preset: tiny}\n" +
         "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "training: {max_steps: 100}\n"
         "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n";
}

// SpecYaml with 4 samples per step, in micro-batches of `micro` (0: unset, the whole share).
inline std::string BatchedSpecYaml(const std::string& name, int micro = 2) {
  std::string yaml = SpecYaml(name);
  const std::string from = "training: {max_steps: 100}";
  yaml.replace(yaml.find(from), from.size(),
               "training: {max_steps: 100, batch_size: 4" +
                   (micro > 0 ? ", micro_batch_size: " + std::to_string(micro) : "") + "}");
  return yaml;
}

// (type, from, to, reason, attempt) of an event, for comparing histories.
using EventRow = std::tuple<std::string, std::string, std::string, std::string, int>;
inline EventRow Row(const v1::Event& e) {
  return {e.type(), e.from_state(), e.to_state(), e.reason(), e.attempt()};
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    jobs_ = std::make_unique<JobManager>(*store_, clock_, SpecOptions{kRoot});
  }

  // Submits SpecYaml(name, team); returns the stored job.
  v1::Job Submit(const std::string& name, const std::string& team = "vision") {
    return SubmitText(SpecYaml(name, team));
  }
  v1::Job SubmitText(const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_spec_text(yaml);
    v1::SubmitJobResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = jobs_->Submit(req, &resp, &events);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job();
  }

  absl::Status Cancel(const std::string& id, const std::string& reason = "",
                      v1::CancelJobResponse* resp = nullptr,
                      std::vector<v1::Event>* events = nullptr) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    req.set_reason(reason);
    v1::CancelJobResponse r;
    std::vector<v1::Event> e;
    return jobs_->Cancel(req, resp ? resp : &r, events ? events : &e);
  }

  absl::Status Resume(const std::string& id, v1::ResumeJobResponse* resp,
                      std::vector<v1::Event>* events = nullptr) {
    v1::ResumeJobRequest req;
    req.set_job_id(id);
    std::vector<v1::Event> e;
    return jobs_->Resume(req, resp, events ? events : &e);
  }

  // Resumes with the layout fields of `req` (its job_id is set here); `admit` counts its calls
  // in admissions_ and answers admission_.
  absl::Status ResumeWith(const std::string& id, v1::ResumeJobRequest req,
                          v1::ResumeJobResponse* resp, std::vector<v1::Event>* events = nullptr) {
    req.set_job_id(id);
    std::vector<v1::Event> e;
    return jobs_->Resume(req, resp, events ? events : &e, [this](const v1::JobSpec& spec) {
      admitted_.push_back(spec);
      return admission_;
    });
  }

  // Everything the store holds about a job (the row, runs, checkpoints, events), serialised.
  std::vector<std::string> Snapshot(const std::string& id) {
    std::vector<std::string> out = {Stored(id).SerializeAsString()};
    for (const v1::Run& r : store_->ListRuns(id)) out.push_back(r.SerializeAsString());
    for (const v1::Checkpoint& c : store_->ListCheckpoints(id)) {
      out.push_back(c.SerializeAsString());
    }
    for (const v1::Event& e : store_->ListEvents(id, 0, 0)) out.push_back(e.SerializeAsString());
    return out;
  }

  // A COMPLETE checkpoint of attempt 1 at `step`, with `world_size` shards expected.
  v1::Checkpoint AddCompleteCheckpoint(const std::string& id, int64_t step, int world_size) {
    v1::Checkpoint ckpt;
    ckpt.set_job_id(id);
    ckpt.set_attempt(1);
    ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
    ckpt.set_step(step);
    ckpt.set_world_size(world_size);
    absl::StatusOr<v1::Checkpoint> added = store_->AddCheckpoint(ckpt, {});
    EXPECT_TRUE(added.ok()) << added.status();
    return added.ok() ? *added : v1::Checkpoint();
  }

  v1::Job Stored(const std::string& id) {
    absl::StatusOr<v1::Job> job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  std::vector<EventRow> History(const std::string& id) {
    std::vector<EventRow> rows;
    for (const v1::Event& e : store_->ListEvents(id, 0, 0)) rows.push_back(Row(e));
    return rows;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobManager> jobs_;
  absl::Status admission_;                // what the admission check of ResumeWith answers
  std::vector<v1::JobSpec> admitted_;     // the specs it was asked about
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_JOB_MANAGER_TEST_FIXTURE_H_
