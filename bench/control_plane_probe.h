// The control-plane benchmark's synchronous clients: a light prober (paced GetJob and SubmitJob
// calls while a case is measured), a scraper (GET /metrics at an interval, as a Prometheus
// server does), closed-loop submitters (filling a cluster or a queue), and the queries that
// tell what state the controller reached (jobs by state, nodes by state, node LOST events).
// Every call has a deadline, so a controller that stops answering ends a query with an error
// instead of hanging the benchmark.
//
// Thread-safety: Prober's and Scraper's Start/Stop/results from one thread; the free functions
// are independent of each other.
#ifndef DHP_BENCH_CONTROL_PLANE_PROBE_H_
#define DHP_BENCH_CONTROL_PLANE_PROBE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dhp::bench {

// Latencies of one kind of call, and how many succeeded or failed.
struct CallStats {
  std::vector<int64_t> ns;  // every answered call, OK or not
  int64_t ok = 0, errors = 0;
  double seconds = 0;  // wall time over which they ran
  std::string first_error;
  void Add(int64_t latency_ns, const grpc::Status& s);
  void Merge(const CallStats& o);
};

// One channel (its own HTTP/2 connection) with the JobService and NodeService stubs.
struct ControllerStubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::NodeService::Stub> nodes;
};
ControllerStubs ConnectStubs(const std::string& target);

// Calls GetJob `get_per_s` times a second (round-robin over `job_ids` and the jobs it submits
// itself) and SubmitJob `submit_per_s` times a second, each on a thread and a channel of its
// own, paced open-loop (a slow answer delays only the calls after it on that thread).
class Prober {
 public:
  struct Options {
    std::string target;
    double get_per_s = 20;
    double submit_per_s = 2;
    std::string spec_text;  // what SubmitJob sends
    int deadline_ms = 30000;
  };
  Prober(Options options, std::vector<std::string> job_ids);
  ~Prober();  // Stop()
  void Start();
  void Stop();
  const CallStats& gets() const { return gets_; }        // after Stop
  const CallStats& submits() const { return submits_; }  // after Stop

 private:
  void GetLoop();
  void SubmitLoop();
  Options o_;
  ControllerStubs get_stubs_, submit_stubs_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards ids_ (the get thread reads what the submit thread adds)
  std::vector<std::string> ids_;
  CallStats gets_, submits_;
  std::thread get_thread_, submit_thread_;
  std::chrono::steady_clock::time_point start_;
};

// What the scrapes of /metrics took: the wall time of every GET (answered or not, a timed-out
// one at its deadline) and the largest page.
struct ScrapeStats {
  std::vector<int64_t> ns;
  int64_t ok = 0, failed = 0;  // failed: a transport error, a timeout or a status other than 200
  int64_t bytes_max = 0;
  std::string first_error;
};

// GETs http://127.0.0.1:<http_port>/metrics every `every_s` seconds on a thread of its own, the
// first time every_s / 2 after Start (so that a window of k intervals holds k scrapes, none at
// its edges), on a fresh connection each time. Like a Prometheus server, it never overlaps two
// scrapes of the controller: a scrape slower than the interval skips the slots it overran.
// Start does nothing when every_s <= 0. Stop wakes the thread at once but waits for a scrape in
// flight (at most deadline_ms).
class Scraper {
 public:
  struct Options {
    int http_port = 0;
    double every_s = 0;
    int deadline_ms = 30000;
  };
  explicit Scraper(Options options);
  ~Scraper();  // Stop()
  void Start();
  void Stop();
  const ScrapeStats& stats() const { return stats_; }  // after Stop

 private:
  void Loop();
  void ScrapeOnce();
  bool WaitUntil(std::chrono::steady_clock::time_point t);  // false: stopped first
  Options o_;
  std::mutex mu_;  // guards stop_ (with cv_, so that Stop ends the wait at once)
  std::condition_variable cv_;
  bool stop_ = false;
  ScrapeStats stats_;
  std::thread thread_;
};

// SubmitJob from `concurrency` threads (a channel each), closed loop, until `count` calls were
// made, `until` passes or `keep_going` (called before each call, from those threads) says no.
// The new jobs' ids are appended to `ids` when given.
CallStats SubmitMany(const std::string& target, const std::string& spec_text, int64_t count,
                     int concurrency, std::chrono::steady_clock::time_point until, int deadline_ms,
                     std::vector<std::string>* ids, const std::function<bool()>& keep_going);

// Jobs by state name over every state but RUNNING (paged ListJobs), so that a cluster whose jobs
// all run answers with one empty page. `ok` is false when a page failed (then partial).
struct JobTally {
  std::map<std::string, int64_t> by_state;
  int64_t not_running = 0;
  bool ok = false;
  std::string error;
};
JobTally TallyJobsNotRunning(ControllerStubs& stubs, int deadline_ms);

struct NodeTally {
  int64_t total = 0, ready = 0, lost = 0;
  bool ok = false;
  std::string error;
};
NodeTally CountNodes(ControllerStubs& stubs, int deadline_ms);

// node.state events to LOST in the controller's history (WatchJob over all jobs and nodes,
// replayed without following) stamped before `until_us`: all of them, those inside
// [window_start_us, window_end_us) (Unix microseconds), and the distinct nodes.
struct LostEvents {
  int64_t events_read = 0;
  int64_t lost = 0, lost_in_window = 0, nodes = 0;
  bool ok = false;
  std::string error;
};
LostEvents CountLostEvents(ControllerStubs& stubs, int64_t window_start_us, int64_t window_end_us,
                           int64_t until_us, int deadline_ms);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_PROBE_H_
