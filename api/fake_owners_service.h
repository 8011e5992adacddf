// FakeOwnersService: a DhpService for tests and benchmarks of api/authz. Every call answers OK
// at once and is counted; GetJob answers jobs by id with their owner from `owner_of` (NOT_FOUND
// otherwise); SubmitJob and ListJobs keep their last request; Heartbeat launches one rank of
// job "j-1", attempt 2 (each of HeartbeatBatch's too); WatchJob writes `events`. Not thread-safe.
#ifndef DHP_API_FAKE_OWNERS_SERVICE_H_
#define DHP_API_FAKE_OWNERS_SERVICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "api/service.h"

namespace dhp::api {

class FakeOwnersService : public DhpService {
 public:
  std::map<std::string, std::string> owner_of;  // job id -> owner
  std::map<std::string, std::string> job_of_export;  // export id -> job id
  bool record_names = true;                      // off in benchmarks: count only
  int64_t calls = 0;
  std::vector<std::string> names;  // the methods called, in order (when record_names)
  v1::SubmitJobRequest last_submit;
  v1::ListJobsRequest last_list;
  std::vector<v1::Event> events;

#define DHP_FAKE_OWNERS_UNARY(S, M, A, V, P, D)                               \
  absl::Status M(const v1::M##Request& req, v1::M##Response* resp) override { \
    ++calls;                                                                  \
    if (record_names) names.push_back(#M);                                    \
    return Answer(req, resp);                                                 \
  }
  DHP_UNARY_METHODS(DHP_FAKE_OWNERS_UNARY)
#undef DHP_FAKE_OWNERS_UNARY

  absl::Status WatchJob(const v1::WatchJobRequest&, EventSink& sink) override {
    ++calls;
    for (const v1::Event& e : events) sink.Write(e);
    return absl::OkStatus();
  }
  absl::Status Health() override { return absl::OkStatus(); }
  std::string MetricsText() override { return ""; }
  absl::Status PrepareSubmitJob(v1::SubmitJobRequest* req) override {
    ++calls;
    if (record_names) names.push_back("PrepareSubmitJob");
    last_submit = *req;
    return absl::OkStatus();
  }

 private:
  template <typename Req, typename Resp>
  absl::Status Answer(const Req&, Resp*) {
    return absl::OkStatus();
  }
  absl::Status Answer(const v1::GetJobRequest& req, v1::GetJobResponse* resp) {
    auto it = owner_of.find(req.job_id());
    if (it == owner_of.end()) return absl::NotFoundError("job " + req.job_id());
    resp->mutable_job()->set_id(req.job_id());
    resp->mutable_job()->set_owner(it->second);
    return absl::OkStatus();
  }
  absl::Status Answer(const v1::GetExportRequest& req, v1::GetExportResponse* resp) {
    auto it = job_of_export.find(req.id());
    if (it == job_of_export.end()) return absl::NotFoundError("export " + req.id());
    resp->mutable_export_()->set_id(req.id());
    resp->mutable_export_()->set_job_id(it->second);
    return absl::OkStatus();
  }
  absl::Status Answer(const v1::SubmitJobRequest& req, v1::SubmitJobResponse*) {
    last_submit = req;
    return absl::OkStatus();
  }
  absl::Status Answer(const v1::ListJobsRequest& req, v1::ListJobsResponse*) {
    last_list = req;
    return absl::OkStatus();
  }
  absl::Status Answer(const v1::HeartbeatRequest&, v1::HeartbeatResponse* resp) {
    v1::RankLaunch* launch = resp->add_ranks();
    launch->set_job_id("j-1");
    launch->set_attempt(2);
    return absl::OkStatus();
  }
  // Each heartbeat answered as Heartbeat is, its node id in batched_nodes.
  absl::Status Answer(const v1::HeartbeatBatchRequest& req, v1::HeartbeatBatchResponse* resp) {
    for (const v1::RelayedHeartbeat& entry : req.heartbeats()) {
      if (record_names) batched_nodes.push_back(entry.heartbeat().node_id());
      (void)Answer(entry.heartbeat(), resp->add_answers()->mutable_response());
    }
    return absl::OkStatus();
  }

 public:
  std::vector<std::string> batched_nodes;  // HeartbeatBatch's heartbeats that reached it
};

}  // namespace dhp::api

#endif  // DHP_API_FAKE_OWNERS_SERVICE_H_
