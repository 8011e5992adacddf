// api_bench's measurements and their report: the per-case data the benchmark collects and the
// function that turns it into the Markdown table (printed last) and bench/results/api.{md,json}.
// Plain data and one function; no shared state.
#ifndef DHP_BENCH_API_BENCH_REPORT_H_
#define DHP_BENCH_API_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dhp::bench {

struct Options {
  int threads = 4;
  double seconds = 5;         // measured time per case, over all rounds
  double warmup_seconds = 1;  // per case, before the first round
  int rounds = 3;
  int64_t requests = 0;  // per case, over all rounds; > 0 replaces --seconds
  std::string controller_bin;
  std::string spec = "configs/tiny-cpu.yaml";
  std::string out_dir = "bench/results";
  std::string rest_submit_body = "json";  // json | yaml
  std::string grpc_client = "stub";       // stub | dhp
  std::vector<std::string> cases = {"grpc-submit", "rest-submit", "grpc-get", "rest-get"};
  bool keep_temp = false;
};

enum class Transport { kGrpc, kRest };
enum class Op { kSubmit, kGet };
struct Case {
  Transport transport;
  Op op;
  std::string name() const {
    return std::string(transport == Transport::kGrpc ? "grpc" : "rest") + " " +
           (op == Op::kSubmit ? "submit" : "get");
  }
  std::string flag_name() const {  // as in --cases
    std::string n = name();
    n[4] = '-';
    return n;
  }
  const char* method() const { return op == Op::kSubmit ? "SubmitJob" : "GetJob"; }
  const char* transport_label() const { return transport == Transport::kGrpc ? "grpc" : "rest"; }
};

struct SliceResult {
  int64_t requests = 0, errors = 0;
  double seconds = 0;
  double controller_cpu_s = 0, client_cpu_s = 0;
  double other_cpu_s = 0;  // everything else on the machine (other engineers' builds)
  int64_t controller_switches = 0, client_switches = 0;  // context switches
  // The controller thread that used the most CPU (the loop, when it is the bottleneck): its
  // CPU time, and the time it was runnable but waited for a CPU (machine contention).
  double busiest_thread_cpu_s = 0, busiest_thread_wait_s = -1;
  double service_sum_s = 0;  // from the controller's histogram
  int64_t service_count = 0;
  double rate() const { return seconds > 0 ? static_cast<double>(requests) / seconds : 0; }
};

// Everything measured for one case, over all rounds.
struct CaseResult {
  Case c;
  std::vector<int64_t> latency_ns;
  std::vector<SliceResult> rounds;
  std::string first_error;
};

// What the run learned besides the per-case results.
struct RunFacts {
  std::vector<Case> cases;  // the selected cases, in run order
  nlohmann::json machine;
  size_t spec_bytes = 0;
  std::string controller_bin;
  int controller_threads = 0;
  std::string controller_exit;
  size_t jobs_created = 0;
  int64_t reconnects = 0;
  std::string out_dir;  // resolved
};

// Writes api.md and api.json under facts.out_dir and prints the tables last. Returns 0.
int WriteReport(const Options& o, const RunFacts& facts, std::map<std::string, CaseResult>& results);

}  // namespace dhp::bench

#endif  // DHP_BENCH_API_BENCH_REPORT_H_
