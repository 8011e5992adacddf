#include "bench/control_plane_probe.h"

#include <algorithm>
#include <set>

#include "bench/http_load.h"
#include "dhp/v1/job.pb.h"

namespace dhp::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t Ns(SteadyClock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

void SetDeadline(grpc::ClientContext* ctx, int deadline_ms) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
}

// Sleeps until `t` in short steps; false if `stop` became true first.
bool SleepUntil(SteadyClock::time_point t, const std::atomic<bool>& stop) {
  while (!stop) {
    const auto now = SteadyClock::now();
    if (now >= t) return true;
    std::this_thread::sleep_for(
        std::min<SteadyClock::duration>(t - now, std::chrono::milliseconds(50)));
  }
  return false;
}

}  // namespace

void CallStats::Add(int64_t latency_ns, const grpc::Status& s) {
  ns.push_back(latency_ns);
  if (s.ok()) {
    ++ok;
  } else {
    ++errors;
    if (first_error.empty()) {
      first_error =
          "code " + std::to_string(static_cast<int>(s.error_code())) + ": " + s.error_message();
    }
  }
}

void CallStats::Merge(const CallStats& o) {
  ns.insert(ns.end(), o.ns.begin(), o.ns.end());
  ok += o.ok;
  errors += o.errors;
  seconds = std::max(seconds, o.seconds);
  if (first_error.empty()) first_error = o.first_error;
}

ControllerStubs ConnectStubs(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(256 << 20);
  ControllerStubs s;
  s.channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  s.channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  s.jobs = v1::JobService::NewStub(s.channel);
  s.nodes = v1::NodeService::NewStub(s.channel);
  return s;
}

// ---- Prober ------------------------------------------------------------------------------------

Prober::Prober(Options options, std::vector<std::string> job_ids)
    : o_(std::move(options)), ids_(std::move(job_ids)) {}

Prober::~Prober() { Stop(); }

void Prober::Start() {
  get_stubs_ = ConnectStubs(o_.target);
  submit_stubs_ = ConnectStubs(o_.target);
  start_ = SteadyClock::now();
  if (o_.get_per_s > 0) get_thread_ = std::thread([this] { GetLoop(); });
  if (o_.submit_per_s > 0) submit_thread_ = std::thread([this] { SubmitLoop(); });
}

void Prober::Stop() {
  stop_ = true;
  if (get_thread_.joinable()) get_thread_.join();
  if (submit_thread_.joinable()) submit_thread_.join();
}

void Prober::GetLoop() {
  const auto period = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(1.0 / o_.get_per_s));
  auto next = start_;
  for (size_t i = 0; SleepUntil(next, stop_); ++i, next += period) {
    v1::GetJobRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ids_.empty()) continue;
      req.set_job_id(ids_[(i * 7919) % ids_.size()]);  // a stride that visits them all
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, o_.deadline_ms);
    v1::GetJobResponse resp;
    const auto t0 = SteadyClock::now();
    grpc::Status s = get_stubs_.jobs->GetJob(&ctx, req, &resp);
    gets_.Add(Ns(SteadyClock::now() - t0), s);
  }
  gets_.seconds = std::chrono::duration<double>(SteadyClock::now() - start_).count();
}

void Prober::SubmitLoop() {
  const auto period = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(1.0 / o_.submit_per_s));
  auto next = start_;
  for (; SleepUntil(next, stop_); next += period) {
    v1::SubmitJobRequest req;
    req.set_spec_text(o_.spec_text);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, o_.deadline_ms);
    v1::SubmitJobResponse resp;
    const auto t0 = SteadyClock::now();
    grpc::Status s = submit_stubs_.jobs->SubmitJob(&ctx, req, &resp);
    submits_.Add(Ns(SteadyClock::now() - t0), s);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ids_.push_back(resp.job().id());
    }
  }
  submits_.seconds = std::chrono::duration<double>(SteadyClock::now() - start_).count();
}

// ---- Scraper -----------------------------------------------------------------------------------

Scraper::Scraper(Options options) : o_(std::move(options)) {}

Scraper::~Scraper() { Stop(); }

void Scraper::Start() {
  if (o_.every_s > 0) thread_ = std::thread([this] { Loop(); });
}

void Scraper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Scraper::WaitUntil(SteadyClock::time_point t) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_until(lock, t, [this] { return stop_; });
}

void Scraper::Loop() {
  const auto period = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(o_.every_s));
  for (auto next = SteadyClock::now() + period / 2; WaitUntil(next); next += period) {
    ScrapeOnce();
    while (next + period < SteadyClock::now()) next += period;  // no catching up
  }
}

void Scraper::ScrapeOnce() {
  const auto t0 = SteadyClock::now();
  absl::StatusOr<HttpResult> r = HttpFetch("127.0.0.1", static_cast<uint16_t>(o_.http_port),
                                           "GET", "/metrics",
                                           std::chrono::milliseconds(o_.deadline_ms));
  stats_.ns.push_back(Ns(SteadyClock::now() - t0));
  if (r.ok() && r->status == 200) {
    ++stats_.ok;
    stats_.bytes_max = std::max<int64_t>(stats_.bytes_max, r->body.size());
    return;
  }
  ++stats_.failed;
  if (stats_.first_error.empty()) {
    stats_.first_error = r.ok() ? "HTTP status " + std::to_string(r->status)
                                : std::string(r.status().message());
  }
}

// ---- closed-loop submitters --------------------------------------------------------------------

CallStats SubmitMany(const std::string& target, const std::string& spec_text, int64_t count,
                     int concurrency, SteadyClock::time_point until, int deadline_ms,
                     std::vector<std::string>* ids, const std::function<bool()>& keep_going) {
  std::atomic<int64_t> next{0};
  std::mutex mu;  // guards the merge into `all` and `ids`
  CallStats all;
  std::vector<std::thread> threads;
  const auto start = SteadyClock::now();
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      ControllerStubs stubs = ConnectStubs(target);
      CallStats mine;
      std::vector<std::string> my_ids;
      v1::SubmitJobRequest req;
      req.set_spec_text(spec_text);
      while (SteadyClock::now() < until && keep_going() && next.fetch_add(1) < count) {
        grpc::ClientContext ctx;
        const auto t0 = SteadyClock::now();
        SetDeadline(&ctx, deadline_ms);
        v1::SubmitJobResponse resp;
        grpc::Status s = stubs.jobs->SubmitJob(&ctx, req, &resp);
        mine.Add(Ns(SteadyClock::now() - t0), s);
        if (s.ok()) my_ids.push_back(resp.job().id());
      }
      std::lock_guard<std::mutex> lock(mu);
      all.Merge(mine);
      if (ids != nullptr) ids->insert(ids->end(), my_ids.begin(), my_ids.end());
    });
  }
  for (std::thread& th : threads) th.join();
  all.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return all;
}

// ---- state queries
// -------------------------------------------------------------------------------

JobTally TallyJobsNotRunning(ControllerStubs& stubs, int deadline_ms) {
  JobTally t;
  v1::ListJobsRequest req;
  for (int s = 1; s < v1::JobState_descriptor()->value_count(); ++s) {
    const int number = v1::JobState_descriptor()->value(s)->number();
    if (number != v1::JOB_STATE_RUNNING) req.add_states(static_cast<v1::JobState>(number));
  }
  req.set_page_size(1000);
  for (int page = 0; page < 1000; ++page) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline_ms);
    v1::ListJobsResponse resp;
    grpc::Status s = stubs.jobs->ListJobs(&ctx, req, &resp);
    if (!s.ok()) {
      t.error = "ListJobs: " + s.error_message();
      return t;
    }
    for (const v1::Job& j : resp.jobs()) {
      std::string name = v1::JobState_Name(j.state());
      if (name.rfind("JOB_STATE_", 0) == 0) name = name.substr(10);
      ++t.by_state[name];
      ++t.not_running;
    }
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  t.ok = true;
  return t;
}

NodeTally CountNodes(ControllerStubs& stubs, int deadline_ms) {
  NodeTally t;
  v1::ListNodesRequest req;  // every page
  while (true) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline_ms);
    v1::ListNodesResponse resp;
    grpc::Status s = stubs.nodes->ListNodes(&ctx, req, &resp);
    if (!s.ok()) {
      t.error = "ListNodes: " + s.error_message();
      return t;
    }
    for (const v1::Node& n : resp.nodes()) {
      ++t.total;
      t.ready += n.state() == v1::NODE_STATE_READY;
      t.lost += n.state() == v1::NODE_STATE_LOST;
    }
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  t.ok = true;
  return t;
}

LostEvents CountLostEvents(ControllerStubs& stubs, int64_t window_start_us, int64_t window_end_us,
                           int64_t until_us, int deadline_ms) {
  LostEvents out;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline_ms);
  v1::WatchJobRequest req;  // every job and node, history only
  req.set_follow(false);
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stubs.jobs->WatchJob(&ctx, req);
  std::set<std::string> nodes;
  v1::Event e;
  while (reader->Read(&e)) {
    ++out.events_read;
    if (e.type() != "node.state" || e.to_state() != "LOST") continue;
    const int64_t us = e.time().seconds() * 1000000 + e.time().nanos() / 1000;
    if (us >= until_us) continue;
    ++out.lost;
    nodes.insert(e.node_id());
    out.lost_in_window += us >= window_start_us && us < window_end_us;
  }
  grpc::Status s = reader->Finish();
  out.nodes = static_cast<int64_t>(nodes.size());
  if (!s.ok()) {
    out.error = "WatchJob: " + s.error_message();
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace dhp::bench
