// Helpers shared by the Store's tests (store_test.cc: jobs, runs, events; store_tables_test.cc:
// nodes, checkpoints, rendezvous keys, the file itself).
#ifndef DHP_CONTROLLER_STORE_TEST_UTIL_H_
#define DHP_CONTROLLER_STORE_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "controller/store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dhp::controller::store_test {

MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(expected, arg)) return true;
  *result_listener << "differs: " << diff;
  return false;
}

inline google::protobuf::Timestamp Time(int64_t seconds, int32_t nanos = 0) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  t.set_nanos(nanos);
  return t;
}

inline v1::Job MakeJob(const std::string& id, v1::JobState state,
                       const std::map<std::string, std::string>& labels = {}) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_name("name-" + id);
  job.mutable_spec()->set_priority(7);
  for (const auto& [k, v] : labels) (*job.mutable_spec()->mutable_labels())[k] = v;
  job.set_state(state);
  *job.mutable_create_time() = Time(1700000000, 123456789);
  *job.mutable_update_time() = Time(1700000100, 5);
  return job;
}

inline v1::Event MakeEvent(const std::string& type, const std::string& from,
                           const std::string& to) {
  v1::Event event;
  event.set_type(type);
  event.set_from_state(from);
  event.set_to_state(to);
  event.set_reason("because " + to);
  *event.mutable_time() = Time(1700000200, 42000);
  return event;
}

inline absl::Status Create(Store& store, const v1::Job& job) {
  JobWrite write;
  write.job = job;
  write.create = true;
  return store.Commit(write).status();
}

inline std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& job : jobs) ids.push_back(job.id());
  return ids;
}

inline std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/store_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/dhp.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::string path_;
};

}  // namespace dhp::controller::store_test

#endif  // DHP_CONTROLLER_STORE_TEST_UTIL_H_
