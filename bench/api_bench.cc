// api_bench: SubmitJob and GetJob over gRPC and over REST, on loopback, against a real
// dhp-controller process.
//
//   bazel run //bench:api_bench -- --threads 4 --seconds 5
//
// Starts dhp-controller (fresh temporary --data-dir, kernel-chosen ports, read back from its
// --port-file; stopped at the end), then measures four cases: grpc submit, rest submit, grpc
// get, rest get. Each case runs --threads client threads in a closed loop (one request at a
// time per thread, every latency recorded), each thread with its own persistent connections:
// a gRPC channel with a private subchannel pool, i.e. its own HTTP/2 connection (or, with
// --grpc-client dhp, an api::DhpClient), and one keep-alive HTTP/1.1 connection
// (bench/http_load.h). Submits send configs/tiny-cpu.yaml (gRPC: SubmitJobRequest.spec_text;
// REST: POST /v1/jobs with {"spec_text": ...}); gets fetch, round-robin, the ids that the
// submits created.
//
// After a warm-up of every case, --seconds of measurement per case are split into --rounds
// rounds; each round runs the cases back to back (transport order alternating between
// rounds), so that REST and gRPC are measured side by side under the same machine load.
// Reported per case: requests/s (median of the rounds' rates), p50/p90/p99/max latency over
// all requests, errors; REST/gRPC throughput ratios (median of per-round ratios); and, to
// show where the time goes, counters that timer noise does not move much: CPU time and
// context switches per request of the controller and of this client, the controller's own
// mean in-service time (its dhp_api_request_duration_seconds histogram: the hop onto the
// controller's loop thread, queueing there, SQLite), how busy the controller's busiest
// thread was (running, and runnable but waiting for a CPU), and how much CPU other processes
// took meanwhile (the machine is shared).
//
// Prints Markdown tables last and writes them to <out-dir>/api.md, and every number with the
// machine's description to <out-dir>/api.json.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "api/client.h"
#include "bench/api_bench_report.h"
#include "bench/bench_util.h"
#include "bench/controller_process.h"
#include "bench/http_load.h"
#include "dhp/v1/service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Json = nlohmann::json;


// One client thread's connections, kept for the whole run.
struct Client {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> stub;
  std::unique_ptr<api::DhpClient> dhp;  // instead of stub with --grpc-client dhp
  std::unique_ptr<HttpConnection> http;
};

// What the client threads of one case share for one slice of time.
struct SliceInput {
  Case c;
  SteadyClock::duration duration{};  // used when per_thread_requests == 0
  int64_t per_thread_requests = 0;
  const std::vector<std::string>* ids = nullptr;  // for gets
  const v1::SubmitJobRequest* grpc_submit = nullptr;
  std::string rest_body, rest_content_type;
};

struct ThreadOutput {
  std::vector<int64_t> latency_ns;
  std::vector<std::string> new_ids;
  int64_t errors = 0;
  std::string first_error;
  SteadyClock::time_point finished;
};


// The controller's dhp_api_request_duration_seconds {sum, count} for transport and method.
std::pair<double, int64_t> ServiceTime(uint16_t http_port, const Case& c) {
  absl::StatusOr<HttpResult> r = HttpFetch("127.0.0.1", http_port, "GET", "/metrics");
  if (!r.ok() || r->status != 200) return {0, 0};
  const std::string labels_t = std::string("transport=\"") + c.transport_label() + "\"";
  const std::string labels_m = std::string("method=\"") + c.method() + "\"";
  double sum = 0;
  int64_t count = 0;
  std::istringstream lines(r->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(labels_t) == std::string::npos || line.find(labels_m) == std::string::npos) {
      continue;
    }
    const size_t space = line.rfind(' ');
    if (line.rfind("dhp_api_request_duration_seconds_sum{", 0) == 0) {
      sum += std::atof(line.c_str() + space + 1);  // summed over status codes
    } else if (line.rfind("dhp_api_request_duration_seconds_count{", 0) == 0) {
      count += static_cast<int64_t>(std::atof(line.c_str() + space + 1));
    }
  }
  return {sum, count};
}

// One request of case `in.c` on `client`. Returns "" on success, else the error. The new job
// id of a submit goes to `new_id`; it is extracted after `*done` is stamped, so that JSON
// parsing of the REST response is not counted (gRPC's binary parsing is, inside the stub).
std::string DoRequest(Client& client, const SliceInput& in, size_t seq,
                      SteadyClock::time_point* done, std::string* new_id) {
  if (in.c.transport == Transport::kGrpc && client.dhp != nullptr) {
    if (in.c.op == Op::kSubmit) {
      absl::StatusOr<v1::SubmitJobResponse> resp = client.dhp->SubmitJob(*in.grpc_submit);
      *done = SteadyClock::now();
      if (!resp.ok()) return "gRPC SubmitJob: " + std::string(resp.status().message());
      *new_id = resp->job().id();
      return new_id->empty() ? "gRPC SubmitJob: response has no job id" : "";
    }
    v1::GetJobRequest req;
    req.set_job_id((*in.ids)[seq % in.ids->size()]);
    absl::StatusOr<v1::GetJobResponse> resp = client.dhp->GetJob(req);
    *done = SteadyClock::now();
    if (!resp.ok()) return "gRPC GetJob " + req.job_id() + ": " + std::string(resp.status().message());
    return resp->job().id() == req.job_id() ? "" : "gRPC GetJob: wrong job in response";
  }
  if (in.c.transport == Transport::kGrpc) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (in.c.op == Op::kSubmit) {
      v1::SubmitJobResponse resp;
      grpc::Status s = client.stub->SubmitJob(&ctx, *in.grpc_submit, &resp);
      *done = SteadyClock::now();
      if (!s.ok()) return "gRPC SubmitJob: " + s.error_message();
      *new_id = resp.job().id();
      return new_id->empty() ? "gRPC SubmitJob: response has no job id" : "";
    }
    v1::GetJobRequest req;
    req.set_job_id((*in.ids)[seq % in.ids->size()]);
    v1::GetJobResponse resp;
    grpc::Status s = client.stub->GetJob(&ctx, req, &resp);
    *done = SteadyClock::now();
    if (!s.ok()) return "gRPC GetJob " + req.job_id() + ": " + s.error_message();
    return resp.job().id() == req.job_id() ? "" : "gRPC GetJob: wrong job in response";
  }
  if (in.c.op == Op::kSubmit) {
    absl::StatusOr<HttpResult> r =
        client.http->Request("POST", "/v1/jobs", in.rest_content_type, in.rest_body);
    *done = SteadyClock::now();
    if (!r.ok()) return std::string(r.status().message());
    if (r->status != 200) return "POST /v1/jobs: HTTP " + std::to_string(r->status) + " " + r->body;
    v1::SubmitJobResponse resp;
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(r->body, &resp, opts).ok() ||
        resp.job().id().empty()) {
      return "POST /v1/jobs: no job id in the response: " + r->body.substr(0, 200);
    }
    *new_id = resp.job().id();
    return "";
  }
  const std::string& id = (*in.ids)[seq % in.ids->size()];
  absl::StatusOr<HttpResult> r = client.http->Request("GET", "/v1/jobs/" + id);
  *done = SteadyClock::now();
  if (!r.ok()) return std::string(r.status().message());
  if (r->status != 200) return "GET /v1/jobs/" + id + ": HTTP " + std::to_string(r->status);
  return r->body.find(id) != std::string::npos ? "" : "GET /v1/jobs/" + id + ": wrong job";
}

// Runs one slice of case `in.c` on all clients at once; appends latencies to `result` when
// given (warm-ups pass none) and new job ids to `ids_out`.
SliceResult RunSlice(std::vector<Client>& clients, const SliceInput& in,
                     const ControllerProcess& controller, CaseResult* result,
                     std::vector<std::string>* ids_out) {
  const size_t n = clients.size();
  std::vector<ThreadOutput> out(n);
  std::mutex mu;  // guards go and start/end below
  std::condition_variable cv;
  bool go = false;
  SteadyClock::time_point start, end;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      ThreadOutput& o = out[t];
      o.latency_ns.reserve(1 << 14);
      // Spread the threads over the id list so that they do not fetch the same job in step.
      size_t seq = in.ids != nullptr && !in.ids->empty() ? t * in.ids->size() / n : 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      for (int64_t i = 0;; ++i) {
        const SteadyClock::time_point t0 = SteadyClock::now();
        if (in.per_thread_requests > 0 ? i >= in.per_thread_requests : t0 >= end) break;
        SteadyClock::time_point t1;
        std::string id;
        std::string err = DoRequest(clients[t], in, seq++, &t1, &id);
        o.latency_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        if (!err.empty()) {
          if (o.errors++ == 0) o.first_error = err;
        } else if (!id.empty()) {
          o.new_ids.push_back(std::move(id));
        }
      }
      o.finished = SteadyClock::now();
    });
  }
  std::pair<double, int64_t> service0 = ServiceTime(controller.http_port(), in.c);
  const double controller_cpu0 = controller.CpuSeconds();
  const std::map<pid_t, ControllerProcess::ThreadTimes> thread_cpu0 =
      controller.ThreadCpuTimes();
  const double client_cpu0 = ProcessCpuSeconds();
  const int64_t client_switches0 = ProcessContextSwitches();
  const double machine_busy0 = MachineBusySeconds();
  {
    std::lock_guard<std::mutex> lock(mu);
    start = SteadyClock::now();
    end = start + in.duration;
    go = true;
  }
  cv.notify_all();
  for (std::thread& th : threads) th.join();
  SliceResult r;
  r.controller_cpu_s = controller.CpuSeconds() - controller_cpu0;
  for (const auto& [tid, now] : controller.ThreadCpuTimes()) {
    auto before = thread_cpu0.find(tid);
    ControllerProcess::ThreadTimes base;
    if (before != thread_cpu0.end()) base = before->second;
    const double used = now.cpu_s - base.cpu_s;
    r.controller_switches += now.context_switches - base.context_switches;
    if (used > r.busiest_thread_cpu_s) {
      r.busiest_thread_cpu_s = used;
      r.busiest_thread_wait_s = now.runqueue_wait_s >= 0 && base.runqueue_wait_s >= 0
                                    ? now.runqueue_wait_s - base.runqueue_wait_s
                                    : -1;
    }
  }
  r.client_cpu_s = ProcessCpuSeconds() - client_cpu0;
  r.client_switches = ProcessContextSwitches() - client_switches0;
  r.other_cpu_s = MachineBusySeconds() - machine_busy0 - r.controller_cpu_s - r.client_cpu_s;
  std::pair<double, int64_t> service1 = ServiceTime(controller.http_port(), in.c);
  r.service_sum_s = service1.first - service0.first;
  r.service_count = service1.second - service0.second;
  SteadyClock::time_point last = start;
  for (ThreadOutput& o : out) {
    last = std::max(last, o.finished);
    r.requests += static_cast<int64_t>(o.latency_ns.size());
    r.errors += o.errors;
    if (ids_out != nullptr) ids_out->insert(ids_out->end(), o.new_ids.begin(), o.new_ids.end());
    if (result != nullptr) {
      result->latency_ns.insert(result->latency_ns.end(), o.latency_ns.begin(), o.latency_ns.end());
      if (result->first_error.empty()) result->first_error = o.first_error;
    }
  }
  r.seconds = std::chrono::duration<double>(last - start).count();
  if (result != nullptr) result->rounds.push_back(r);
  return r;
}

// ---- paths and machine description ---------------------------------------------------------

// The controller built with this benchmark (Bazel: a data dependency, so in its runfiles;
// both builds: ../controller/dhp-controller beside this binary's folder), else the workspace's
// bazel-bin.
std::string DefaultControllerBin(const char* argv0) {
  std::vector<std::string> candidates;
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(std::string(rf) + "/dhp/controller/dhp-controller");
  }
  candidates.push_back(std::string(argv0) + ".runfiles/dhp/controller/dhp-controller");
  candidates.push_back(
      (std::filesystem::path(argv0).parent_path().parent_path() / "controller/dhp-controller")
          .string());
  candidates.push_back(InWorkspace("bazel-bin/controller/dhp-controller"));
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return std::filesystem::absolute(c).string();
  }
  return candidates.back();
}

// A workspace file that this binary also has in its runfiles (a data dependency): the
// workspace's copy if there is one, else the runfiles' copy (running bazel-bin/... directly
// from another directory).
std::string DataFile(const std::string& path, const char* argv0) {
  const std::string in_ws = InWorkspace(path);
  if (path.empty() || path[0] == '/' || ::access(in_ws.c_str(), R_OK) == 0) return in_ws;
  const char* rf = std::getenv("RUNFILES_DIR");
  const std::string runfiles = rf != nullptr ? std::string(rf) : std::string(argv0) + ".runfiles";
  const std::string in_runfiles = runfiles + "/dhp/" + path;
  if (::access(in_runfiles.c_str(), R_OK) == 0) return in_runfiles;
  return in_ws;
}

// ---- main -----------------------------------------------------------------------------------

int Main(int argc, char** argv) {
  CLI::App app{"api_bench: SubmitJob/GetJob over gRPC and REST against a real dhp-controller"};
  Options o;
  app.add_option("--threads", o.threads, "Client threads, each with its own connection")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--seconds", o.seconds, "Measured seconds per case, over all rounds")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--requests", o.requests,
                 "Requests per case over all rounds instead of --seconds (0: use --seconds)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-seconds", o.warmup_seconds, "Warm-up per case before measuring")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", o.rounds,
                 "Rounds of the four cases back to back; rates and ratios are medians of rounds")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--controller-bin", o.controller_bin,
                 "dhp-controller binary (default: the one built with this target, else "
                 "bazel-bin/controller/dhp-controller)");
  app.add_option("--spec", o.spec, "Job spec to submit (relative: to the workspace)")
      ->capture_default_str();
  app.add_option("--out-dir", o.out_dir,
                 "Where api.md and api.json go (relative: to the workspace under bazel run)")
      ->capture_default_str();
  app.add_option("--rest-submit-body", o.rest_submit_body,
                 "REST submit body: json ({\"spec_text\": ...}) or yaml (the spec itself)")
      ->capture_default_str()->check(CLI::IsMember({"json", "yaml"}));
  app.add_option("--grpc-client", o.grpc_client,
                 "stub: per thread a channel with a private subchannel pool, so its own HTTP/2 "
                 "connection; dhp: per thread an api::DhpClient (as dhpctl and agents use), "
                 "whose channels share one connection through gRPC's global subchannel pool")
      ->capture_default_str()
      ->check(CLI::IsMember({"stub", "dhp"}));
  app.add_option("--cases", o.cases,
                 "Cases to run (e.g. to profile one): grpc-submit, rest-submit, grpc-get, "
                 "rest-get")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"grpc-submit", "rest-submit", "grpc-get", "rest-get"}));
  app.add_flag("--keep-temp", o.keep_temp, "Keep the controller's temporary data dir and log");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);

  const std::string controller_bin =
      o.controller_bin.empty() ? DefaultControllerBin(argv[0]) : InWorkspace(o.controller_bin);
  const std::string spec_path = DataFile(o.spec, argv[0]);
  const std::string spec_text = ReadFile(spec_path);
  if (spec_text.empty()) {
    std::cerr << "api_bench: cannot read the job spec " << spec_path << " (--spec)\n";
    return 1;
  }
  const std::string out_dir = InWorkspace(o.out_dir);
  Json machine = MachineInfo();

  absl::StatusOr<std::unique_ptr<ControllerProcess>> started =
      ControllerProcess::Start(controller_bin);
  if (!started.ok()) {
    std::cerr << "api_bench: " << started.status().message() << "\n";
    return 1;
  }
  ControllerProcess& controller = **started;
  if (o.keep_temp) controller.keep_temp_dir();
  std::cerr << "api_bench: " << controller_bin << " pid " << controller.pid() << ", gRPC :"
            << controller.grpc_port() << ", REST :" << controller.http_port() << ", log "
            << controller.log_path() << "\n";

  // Connections: one gRPC channel per thread, each with a private subchannel pool so that it
  // really opens its own HTTP/2 connection (channels with equal arguments otherwise share
  // one), and one keep-alive HTTP/1.1 connection per thread. All connected before measuring.
  const std::string grpc_target = "127.0.0.1:" + std::to_string(controller.grpc_port());
  std::vector<Client> clients(o.threads);
  for (Client& c : clients) {
    bool grpc_up = true;
    if (o.grpc_client == "dhp") {
      c.dhp = std::make_unique<api::DhpClient>(grpc_target);
      grpc_up = c.dhp->ListNodes(v1::ListNodesRequest()).ok();  // connects
    } else {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetMaxReceiveMessageSize(64 << 20);
      c.channel = grpc::CreateCustomChannel(grpc_target, grpc::InsecureChannelCredentials(), args);
      c.stub = v1::JobService::NewStub(c.channel);
      grpc_up = c.channel->WaitForConnected(std::chrono::system_clock::now() +
                                            std::chrono::seconds(10));
    }
    c.http = std::make_unique<HttpConnection>("127.0.0.1", controller.http_port());
    absl::Status http_up = c.http->Connect();
    if (!grpc_up || !http_up.ok()) {
      std::cerr << "api_bench: cannot connect to the controller: "
                << (grpc_up ? std::string(http_up.message()) : "gRPC " + grpc_target) << "\n";
      return 1;
    }
  }

  v1::SubmitJobRequest grpc_submit;
  grpc_submit.set_spec_text(spec_text);
  SliceInput base;
  base.grpc_submit = &grpc_submit;
  if (o.rest_submit_body == "json") {
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(grpc_submit, &base.rest_body, print);
    base.rest_content_type = "application/json";
  } else {
    base.rest_body = spec_text;
    base.rest_content_type = "application/yaml";
  }

  std::vector<Case> cases;  // the selected ones, submits first: gets need their jobs
  for (Op op : {Op::kSubmit, Op::kGet}) {
    for (Transport t : {Transport::kGrpc, Transport::kRest}) {
      const Case c{t, op};
      if (std::count(o.cases.begin(), o.cases.end(), c.flag_name()) > 0) cases.push_back(c);
    }
  }
  auto selected = [&](const Case& c) {
    return std::any_of(cases.begin(), cases.end(), [&](const Case& x) {
      return x.transport == c.transport && x.op == c.op;
    });
  };
  std::map<std::string, CaseResult> results;
  for (const Case& c : cases) results[c.name()].c = c;
  std::vector<std::string> ids;  // every job created so far; gets read them

  auto run = [&](const Case& c, SteadyClock::duration d, int64_t per_thread, CaseResult* res) {
    SliceInput in = base;
    in.c = c;
    in.duration = d;
    in.per_thread_requests = per_thread;
    in.ids = &ids;
    std::vector<std::string> new_ids;
    SliceResult r = RunSlice(clients, in, controller, res, &new_ids);
    ids.insert(ids.end(), new_ids.begin(), new_ids.end());
    std::cerr << "  " << (res ? "" : "warm-up ") << c.name() << ": " << r.requests << " in "
              << Fixed(r.seconds, 2) << " s (" << Fixed(r.rate(), 0) << "/s), " << r.errors
              << " errors\n";
  };

  const auto warmup = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(o.warmup_seconds));
  const auto slice = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(o.seconds / o.rounds));
  const int64_t per_thread =
      o.requests > 0 ? std::max<int64_t>(1, (o.requests + o.rounds * o.threads - 1) /
                                                (static_cast<int64_t>(o.rounds) * o.threads))
                     : 0;
  std::cerr << "api_bench: warm-up " << o.warmup_seconds << " s per case\n";
  for (const Case& c : cases) {
    // Gets need jobs: without a submit warm-up, create 25 per thread first.
    if (c.op == Op::kGet && ids.size() < clients.size()) {
      run(Case{Transport::kGrpc, Op::kSubmit}, {}, 25, nullptr);
    }
    if (o.warmup_seconds > 0) run(c, warmup, 0, nullptr);
  }
  for (int round = 0; round < o.rounds; ++round) {
    std::cerr << "api_bench: round " << round + 1 << "/" << o.rounds << "\n";
    // Alternate which transport goes first, so that drift in machine load favours neither.
    const bool rest_first = round % 2 == 1;
    for (Op op : {Op::kSubmit, Op::kGet}) {
      for (Transport t : rest_first ? std::vector<Transport>{Transport::kRest, Transport::kGrpc}
                                    : std::vector<Transport>{Transport::kGrpc, Transport::kRest}) {
        const Case c{t, op};
        if (selected(c)) run(c, slice, per_thread, &results[c.name()]);
      }
    }
  }
  const int controller_threads = controller.ThreadCount();
  int64_t reconnects = 0;
  for (const Client& c : clients) reconnects += c.http->reconnects();
  machine["loadavg_at_end"] = Trim(ReadFile("/proc/loadavg"));
  machine["cpu_pressure_some_avg10_at_end"] = CpuPressureAvg10();
  const std::string controller_exit = controller.Stop();

  RunFacts facts;
  facts.cases = cases;
  facts.machine = machine;
  facts.spec_bytes = spec_text.size();
  facts.controller_bin = controller_bin;
  facts.controller_threads = controller_threads;
  facts.controller_exit = controller_exit;
  facts.jobs_created = ids.size();
  facts.reconnects = reconnects;
  facts.out_dir = out_dir;
  return WriteReport(o, facts, results);
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
