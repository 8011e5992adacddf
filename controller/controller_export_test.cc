// ExportCheckpoint, GetExport and ListExports through the Controller: a real loop thread over a
// Store in a temporary file, with a fake dhp-ckpt (a shell script written here) that writes a
// file into its --hf-dir, fails with a message, or hangs until killed.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/controller_test_fixture.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using namespace std::chrono_literals;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ControllerExportTest : public ControllerFixture {
 protected:
  void TearDown() override {
    ControllerFixture::TearDown();
    std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    ControllerFixture::SetUp();
    dir_ = ::testing::TempDir() + "/export-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
           std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/dhp.db";
    options_.heartbeat_check_ms = 50;
    options_.exports.root = dir_ + "/exports";
    options_.exports.dhp_ckpt = dir_ + "/dhp-ckpt";
    options_.exports.max_concurrent = 1;
    options_.retention_s = 0;  // the fixture's final jobs carry no update time: keep them
    // The fake dhp-ckpt: export CKPT --hf-dir OUT --dtype D. Its behaviour comes from the
    // file `mode` beside it: ok, fail or hang.
    Script("#!/bin/sh\n"
           "here=$(dirname \"$0\")\n"
           "echo \"$@\" >> \"$here/calls\"\n"
           "case $(cat \"$here/mode\") in\n"
           "  fail) echo 'dhp-ckpt export: shard rank-1 is damaged' >&2; exit 1 ;;\n"
           "  hang) touch \"$here/started\"; sleep 60; exit 0 ;;\n"
           "  slow) sleep 0.3 ;;\n"
           "esac\n"
           "mkdir -p \"$4\" && echo \"$2 $6\" > \"$4/config.json\"\n"
           "echo \"exported step of $2 into $4\"\n");
    Mode("ok");
    {
      // The rows the tests export from, written before the controller starts: the store's
      // connection is its loop's alone once it runs (two threads on it corrupted the file).
      // j-1 has three checkpoints, j-2 none.
      absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
      ASSERT_TRUE(store.ok()) << store.status();
      for (const char* id : {"j-1", "j-2"}) {
        JobWrite write;
        write.job.set_id(id);
        write.job.set_state(v1::JOB_STATE_SUCCEEDED);
        write.create = true;
        const absl::StatusOr<std::vector<v1::Event>> committed = (*store)->Commit(write);
        ASSERT_TRUE(committed.ok()) << committed.status();
      }
      complete_ = AddCheckpoint(**store, 10, v1::CHECKPOINT_STATE_COMPLETE);
      newer_complete_ = AddCheckpoint(**store, 20, v1::CHECKPOINT_STATE_COMPLETE);
      partial_ = AddCheckpoint(**store, 30, v1::CHECKPOINT_STATE_PARTIAL);
    }
    StartController();
  }
  void Script(const std::string& text) {
    std::ofstream(options_.exports.dhp_ckpt) << text;
    ::chmod(options_.exports.dhp_ckpt.c_str(), 0755);
  }
  void Mode(const std::string& mode) { std::ofstream(dir_ + "/mode") << mode << "\n"; }

  int64_t AddCheckpoint(Store& store, int64_t step, v1::CheckpointState state) {
    v1::Checkpoint c;
    c.set_job_id("j-1");
    c.set_attempt(1);
    c.set_step(step);
    c.set_state(state);
    c.set_path(dir_ + "/checkpoints/j-1/step-" + std::to_string(step));
    absl::StatusOr<v1::Checkpoint> added = store.AddCheckpoint(c, {});
    EXPECT_TRUE(added.ok()) << added.status();
    return added.ok() ? added->id() : 0;
  }

  absl::StatusOr<v1::Export> Export(const std::string& job_id, int64_t checkpoint_id = 0,
                                    const std::string& dtype = "") {
    v1::ExportCheckpointRequest req;
    req.set_job_id(job_id);
    req.set_checkpoint_id(checkpoint_id);
    req.set_dtype(dtype);
    v1::ExportCheckpointResponse resp;
    absl::Status s = controller_->ExportCheckpoint(req, &resp);
    if (!s.ok()) return s;
    return resp.export_();
  }
  absl::StatusOr<v1::Export> Get(const std::string& id) {
    v1::GetExportRequest req;
    req.set_id(id);
    v1::GetExportResponse resp;
    absl::Status s = controller_->GetExport(req, &resp);
    if (!s.ok()) return s;
    return resp.export_();
  }
  // The export once SUCCEEDED or FAILED (waits up to 20 s).
  v1::Export WaitFinal(const std::string& id) {
    v1::Export e;
    for (int i = 0; i < 2000; ++i) {
      absl::StatusOr<v1::Export> got = Get(id);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      e = *got;
      if (e.state() == v1::EXPORT_STATE_SUCCEEDED || e.state() == v1::EXPORT_STATE_FAILED) break;
      std::this_thread::sleep_for(10ms);
    }
    return e;
  }

  std::string dir_;
  int64_t complete_ = 0, newer_complete_ = 0, partial_ = 0;
};

TEST_F(ControllerExportTest, ExportsTheNewestCompleteCheckpointIntoRootSlashId) {
  absl::StatusOr<v1::Export> started = Export("j-1");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->id().rfind("x-", 0), 0u) << started->id();
  EXPECT_TRUE(started->state() == v1::EXPORT_STATE_RUNNING ||
              started->state() == v1::EXPORT_STATE_PENDING);
  EXPECT_EQ(started->out_dir(), options_.exports.root + "/" + started->id());
  EXPECT_EQ(started->checkpoint_id(), newer_complete_);  // not the newer PARTIAL one
  EXPECT_EQ(started->step(), 20);
  EXPECT_EQ(started->dtype(), "bf16");

  v1::Export done = WaitFinal(started->id());
  EXPECT_EQ(done.state(), v1::EXPORT_STATE_SUCCEEDED) << done.message();
  EXPECT_NE(done.message().find("exported step of"), std::string::npos) << done.message();
  EXPECT_TRUE(done.has_finish_time());
  // dhp-ckpt ran with the checkpoint's directory and the output under export.root.
  EXPECT_EQ(ReadAll(done.out_dir() + "/config.json"),
            dir_ + "/checkpoints/j-1/step-20 bf16\n");
  EXPECT_EQ(ReadAll(dir_ + "/calls"),
            "export " + dir_ + "/checkpoints/j-1/step-20 --hf-dir " + done.out_dir() +
                " --dtype bf16\n");

  // A chosen checkpoint and dtype; ListExports, newest first.
  absl::StatusOr<v1::Export> second = Export("j-1", complete_, "fp32");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(WaitFinal(second->id()).state(), v1::EXPORT_STATE_SUCCEEDED);
  EXPECT_EQ(ReadAll(second->out_dir() + "/config.json"),
            dir_ + "/checkpoints/j-1/step-10 fp32\n");
  v1::ListExportsRequest list_req;
  list_req.set_job_id("j-1");
  v1::ListExportsResponse listed;
  ASSERT_TRUE(controller_->ListExports(list_req, &listed).ok());
  ASSERT_EQ(listed.exports_size(), 2);
  EXPECT_EQ(listed.exports(0).id(), second->id());
  EXPECT_EQ(listed.exports(1).id(), started->id());

  // The records survive a restart.
  StopController();
  StartController();
  absl::StatusOr<v1::Export> after = Get(started->id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state(), v1::EXPORT_STATE_SUCCEEDED);
  EXPECT_EQ(after->out_dir(), done.out_dir());
}

TEST_F(ControllerExportTest, AFailingDhpCkptFailsTheExportWithItsMessage) {
  Mode("fail");
  absl::StatusOr<v1::Export> started = Export("j-1");
  ASSERT_TRUE(started.ok()) << started.status();
  v1::Export done = WaitFinal(started->id());
  EXPECT_EQ(done.state(), v1::EXPORT_STATE_FAILED);
  EXPECT_EQ(done.message(),
            "dhp-ckpt exited with code 1: dhp-ckpt export: shard rank-1 is damaged");
  EXPECT_FALSE(std::filesystem::exists(done.out_dir()));
}

TEST_F(ControllerExportTest, AMissingDhpCkptFailsTheExport) {
  std::filesystem::remove(options_.exports.dhp_ckpt);
  absl::StatusOr<v1::Export> started = Export("j-1");
  ASSERT_TRUE(started.ok()) << started.status();
  v1::Export done = WaitFinal(started->id());
  EXPECT_EQ(done.state(), v1::EXPORT_STATE_FAILED);
  EXPECT_NE(done.message().find("cannot run " + options_.exports.dhp_ckpt), std::string::npos)
      << done.message();
}

TEST_F(ControllerExportTest, RefusesWhatCannotBeExported) {
  absl::StatusOr<v1::Export> e = Export("j-nosuch");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound) << e.status();
  EXPECT_NE(e.status().message().find("j-nosuch"), std::string::npos) << e.status();

  e = Export("j-1", partial_);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
  EXPECT_NE(e.status().message().find("checkpoint " + std::to_string(partial_) +
                                      " (step 30) of job j-1 is PARTIAL, not COMPLETE"),
            std::string::npos)
      << e.status();

  e = Export("j-1", 999999);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound) << e.status();
  EXPECT_NE(e.status().message().find("has no checkpoint 999999"), std::string::npos);

  e = Export("j-1", 0, "fp64");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  EXPECT_EQ(e.status().message(),
            "dtype: \"fp64\" is not one of bf16, fp32, fp16, keep (empty: bf16)");

  e = Export("j-1", -3);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  EXPECT_EQ(e.status().message().rfind("checkpoint_id: -3 is negative", 0), 0u) << e.status();

  e = Export("");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();

  // A job without a COMPLETE checkpoint.
  e = Export("j-2");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
  EXPECT_NE(e.status().message().find("job j-2 has no COMPLETE checkpoint"), std::string::npos)
      << e.status();

  EXPECT_EQ(Get("x-nosuch").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Get("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/calls"));  // nothing ran
}

TEST_F(ControllerExportTest, ExportsBeyondMaxConcurrentWaitPending) {
  Mode("slow");
  absl::StatusOr<v1::Export> first = Export("j-1");
  absl::StatusOr<v1::Export> second = Export("j-1");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->state(), v1::EXPORT_STATE_RUNNING);
  EXPECT_EQ(second->state(), v1::EXPORT_STATE_PENDING);
  EXPECT_EQ(WaitFinal(first->id()).state(), v1::EXPORT_STATE_SUCCEEDED);
  v1::Export done = WaitFinal(second->id());
  EXPECT_EQ(done.state(), v1::EXPORT_STATE_SUCCEEDED);
  EXPECT_GE(done.start_time().seconds() * 1000000000LL + done.start_time().nanos(),
            Get(first->id())->finish_time().seconds() * 1000000000LL +
                Get(first->id())->finish_time().nanos());
}

TEST_F(ControllerExportTest, AnExportRunningWhenTheControllerStopsFailsAtTheNextStart) {
  Mode("hang");
  absl::StatusOr<v1::Export> started = Export("j-1");
  ASSERT_TRUE(started.ok()) << started.status();
  for (int i = 0; i < 1000 && !std::filesystem::exists(dir_ + "/started"); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/started"));
  const auto t0 = std::chrono::steady_clock::now();
  StopController();  // kills the child (it would sleep 60 s)
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_ + "/dhp.db");
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->GetExport(started->id())->state(), v1::EXPORT_STATE_RUNNING);
  }
  StartController();
  absl::StatusOr<v1::Export> after = Get(started->id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state(), v1::EXPORT_STATE_FAILED);
  EXPECT_EQ(after->message(), "controller restarted during the export");
}

}  // namespace
}  // namespace dhp::controller
