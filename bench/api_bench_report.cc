#include "bench/api_bench_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/bench_util.h"

namespace dhp::bench {

using Json = nlohmann::json;

int WriteReport(const Options& o, const RunFacts& facts, std::map<std::string, CaseResult>& results) {
  Json machine = facts.machine;
  const std::string& controller_bin = facts.controller_bin;
  const int controller_threads = facts.controller_threads;
  const std::string& controller_exit = facts.controller_exit;
  const int64_t reconnects = facts.reconnects;
  const std::string& out_dir = facts.out_dir;
  const std::vector<Case>& cases = facts.cases;
  auto selected = [&](const Case& c) {
    return std::any_of(cases.begin(), cases.end(), [&](const Case& x) {
      return x.transport == c.transport && x.op == c.op;
    });
  };
  Json j;
  j["benchmark"] = "api_bench";
  j["machine"] = machine;
  j["config"] = {{"threads", o.threads},
                 {"seconds_per_case", o.seconds},
                 {"requests_per_case", o.requests},
                 {"warmup_seconds_per_case", o.warmup_seconds},
                 {"rounds", o.rounds},
                 {"spec", o.spec},
                 {"spec_bytes", facts.spec_bytes},
                 {"rest_submit_body", o.rest_submit_body},
                 {"grpc_client", o.grpc_client},
                 {"cases", o.cases},
                 {"controller_bin", controller_bin}};
  j["controller"] = {{"threads_at_end", controller_threads},
                     {"exit", controller_exit},
                     {"jobs_created", facts.jobs_created}};
  j["http_reconnects"] = reconnects;

  // Per case: totals over rounds, medians of per-round rates.
  struct Summary {
    int64_t requests = 0, errors = 0, service_count = 0, controller_switches = 0,
            client_switches = 0;
    double seconds = 0, controller_cpu = 0, client_cpu = 0, service_sum = 0;
    double rate = 0, busiest = 0, busiest_wait = 0, others = 0;  // medians of rounds
    double PerRequest(double total) const { return requests > 0 ? total / requests : 0; }
    double ServiceMs() const { return service_count > 0 ? 1e3 * service_sum / service_count : 0; }
  };
  std::map<std::string, Summary> sums;
  Json case_json = Json::array();
  for (const Case& c : cases) {
    CaseResult& r = results[c.name()];
    std::sort(r.latency_ns.begin(), r.latency_ns.end());
    Summary& m = sums[c.name()];
    std::vector<double> rates, busiest, busiest_wait, others;
    Json rounds = Json::array();
    for (const SliceResult& s : r.rounds) {
      m.requests += s.requests;
      m.errors += s.errors;
      m.seconds += s.seconds;
      m.controller_cpu += s.controller_cpu_s;
      m.client_cpu += s.client_cpu_s;
      m.service_sum += s.service_sum_s;
      m.service_count += s.service_count;
      m.controller_switches += s.controller_switches;
      m.client_switches += s.client_switches;
      rates.push_back(s.rate());
      const double wall = std::max(s.seconds, 1e-9);
      busiest.push_back(100 * s.busiest_thread_cpu_s / wall);
      busiest_wait.push_back(s.busiest_thread_wait_s >= 0 ? 100 * s.busiest_thread_wait_s / wall
                                                          : -1);
      others.push_back(s.other_cpu_s / wall);
      rounds.push_back({{"requests", s.requests},
                        {"errors", s.errors},
                        {"seconds", s.seconds},
                        {"requests_per_s", s.rate()},
                        {"controller_cpu_s", s.controller_cpu_s},
                        {"busiest_controller_thread_cpu_s", s.busiest_thread_cpu_s},
                        {"busiest_controller_thread_runqueue_wait_s", s.busiest_thread_wait_s},
                        {"client_cpu_s", s.client_cpu_s},
                        {"other_processes_cpu_s", s.other_cpu_s},
                        {"controller_context_switches", s.controller_switches},
                        {"client_context_switches", s.client_switches}});
    }
    m.rate = Median(rates);
    m.busiest = Median(busiest);
    m.busiest_wait = Median(busiest_wait);
    m.others = Median(others);
    Json cj = {{"case", c.name()},
               {"transport", c.transport_label()},
               {"method", c.method()},
               {"requests", m.requests},
               {"errors", m.errors},
               {"seconds", m.seconds},
               {"requests_per_s_median_of_rounds", m.rate},
               {"requests_per_s_overall", m.seconds > 0 ? m.requests / m.seconds : 0},
               {"latency_ms",
                {{"p50", PercentileMs(r.latency_ns, 0.50)},
                 {"p90", PercentileMs(r.latency_ns, 0.90)},
                 {"p99", PercentileMs(r.latency_ns, 0.99)},
                 {"max", PercentileMs(r.latency_ns, 1.0)},
                 {"min", PercentileMs(r.latency_ns, 0.0)}}},
               {"service_mean_ms", m.ServiceMs()},
               {"service_count", m.service_count},
               {"controller_cpu_us_per_request", 1e6 * m.PerRequest(m.controller_cpu)},
               {"client_cpu_us_per_request", 1e6 * m.PerRequest(m.client_cpu)},
               {"controller_context_switches_per_request", m.PerRequest(m.controller_switches)},
               {"client_context_switches_per_request", m.PerRequest(m.client_switches)},
               {"busiest_controller_thread_cpu_percent_median_of_rounds", m.busiest},
               {"busiest_controller_thread_runqueue_wait_percent_median_of_rounds",
                m.busiest_wait},
               {"other_processes_cores_median_of_rounds", m.others},
               {"rounds", rounds}};
    if (!r.first_error.empty()) cj["first_error"] = r.first_error;
    case_json.push_back(cj);
  }
  j["cases"] = case_json;

  std::ostringstream md;
  md << "## api_bench: SubmitJob / GetJob, gRPC vs REST, real dhp-controller on loopback\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"].get<int>()
     << " CPUs (" << machine["cpu_model"].get<std::string>() << "), shared: load average "
     << machine["loadavg_at_start"].get<std::string>().substr(0, 14)
     << ", CPU pressure (PSI some avg10) "
     << Fixed(machine["cpu_pressure_some_avg10_at_start"].get<double>(), 0) << "% at start. "
     << o.threads << " client threads, closed loop, one keep-alive HTTP/1.1 connection each and "
     << (o.grpc_client == "dhp" ? "one api::DhpClient each (their channels share one HTTP/2 "
                                  "connection); "
                                : "one gRPC channel with its own HTTP/2 connection each; ")
     << (o.requests > 0 ? std::to_string(o.requests) + " requests" : Fixed(o.seconds, 1) + " s")
     << " per case in " << o.rounds << " interleaved rounds after a "
     << Fixed(o.warmup_seconds, 1) << " s warm-up per case. req/s: median of rounds; "
     << "latencies: over all requests of the case.\n\n"
     << "| case | requests | errors | req/s | p50 ms | p90 ms | p99 ms | max ms |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Case& c : cases) {
    const CaseResult& r = results[c.name()];
    const Summary& m = sums[c.name()];
    md << "| " << c.name() << " | " << m.requests << " | " << m.errors << " | "
       << Fixed(m.rate, 0) << " | " << Fixed(PercentileMs(r.latency_ns, 0.5), 2) << " | "
       << Fixed(PercentileMs(r.latency_ns, 0.9), 2) << " | "
       << Fixed(PercentileMs(r.latency_ns, 0.99), 2) << " | "
       << Fixed(PercentileMs(r.latency_ns, 1.0), 2) << " |\n";
  }

  md << "\nWhere the time goes. service: mean time inside the controller's service (hop onto "
        "its loop thread, queueing there, SQLite), from its own latency histogram. CPU and "
        "context switches per request: controller process and this client process. Busiest "
        "controller thread (the loop, for these calls): % of wall time it ran and % it was "
        "runnable but waiting for a CPU; the two summing to ~100 means that one thread is the "
        "bottleneck. Other processes: cores used meanwhile by everything else on the "
        "machine.\n\n"
     << "| case | service ms | controller CPU µs/req | client CPU µs/req | controller ctx "
        "switches/req | client ctx switches/req | busiest thread on CPU % | its runqueue wait "
        "% | other processes, cores |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Case& c : cases) {
    const Summary& m = sums[c.name()];
    md << "| " << c.name() << " | " << Fixed(m.ServiceMs(), 3) << " | "
       << Fixed(1e6 * m.PerRequest(m.controller_cpu), 0) << " | "
       << Fixed(1e6 * m.PerRequest(m.client_cpu), 0) << " | "
       << Fixed(m.PerRequest(m.controller_switches), 1) << " | "
       << Fixed(m.PerRequest(m.client_switches), 1) << " | " << Fixed(m.busiest, 0) << " | "
       << Fixed(m.busiest_wait, 0) << " | " << Fixed(m.others, 2) << " |\n";
  }

  Json ratios = Json::object();
  bool ratio_header = false;
  for (Op op : {Op::kSubmit, Op::kGet}) {
    if (!selected(Case{Transport::kGrpc, op}) || !selected(Case{Transport::kRest, op})) continue;
    if (!ratio_header) {
      md << "\n| REST / gRPC | throughput ratio (median of rounds) | per round | p50 ratio | "
            "p99 ratio |\n|---|---:|---|---:|---:|\n";
      ratio_header = true;
    }
    const CaseResult& g = results[Case{Transport::kGrpc, op}.name()];
    const CaseResult& r = results[Case{Transport::kRest, op}.name()];
    std::vector<double> per_round;
    std::string rounds_text;
    for (size_t i = 0; i < std::min(g.rounds.size(), r.rounds.size()); ++i) {
      const double ratio = g.rounds[i].rate() > 0 ? r.rounds[i].rate() / g.rounds[i].rate() : 0;
      per_round.push_back(ratio);
      rounds_text += (i ? ", " : "") + Fixed(ratio, 2);
    }
    auto ratio_of = [&](double p) {
      const double a = PercentileMs(g.latency_ns, p), b = PercentileMs(r.latency_ns, p);
      return a > 0 ? b / a : 0;
    };
    const std::string name = op == Op::kSubmit ? "submit" : "get";
    ratios[name] = {{"throughput_rest_over_grpc_median", Median(per_round)},
                    {"throughput_rest_over_grpc_per_round", per_round},
                    {"p50_rest_over_grpc", ratio_of(0.5)},
                    {"p99_rest_over_grpc", ratio_of(0.99)}};
    md << "| " << name << " | " << Fixed(Median(per_round), 2) << " | " << rounds_text << " | "
       << Fixed(ratio_of(0.5), 2) << " | " << Fixed(ratio_of(0.99), 2) << " |\n";
  }
  j["ratios"] = ratios;

  // The aim: a few thousand gets per second with p99 in single milliseconds.
  md << "\nAim (a few thousand gets/s, p99 < 10 ms):";
  Json aim = Json::object();
  for (Transport t : {Transport::kGrpc, Transport::kRest}) {
    if (!selected(Case{t, Op::kGet})) continue;
    const CaseResult& r = results[Case{t, Op::kGet}.name()];
    const double rate = sums[r.c.name()].rate, p99 = PercentileMs(r.latency_ns, 0.99);
    const bool met = rate >= 2000 && p99 < 10;
    aim[r.c.transport_label()] = {{"get_per_s", rate}, {"p99_ms", p99}, {"met", met}};
    md << " " << r.c.name() << " " << Fixed(rate, 0) << "/s, p99 " << Fixed(p99, 2) << " ms "
       << (met ? "(met);" : "(missed);");
  }
  md << " HTTP reconnects: " << reconnects << "; controller threads at end: "
     << controller_threads << ".\n";
  j["aim"] = aim;
  j["markdown"] = md.str();

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  std::ofstream(out_dir + "/api.md") << md.str();
  std::ofstream(out_dir + "/api.json") << j.dump(2) << "\n";
  std::cerr << "api_bench: controller " << controller_exit << "; wrote " << out_dir
            << "/api.md and " << out_dir << "/api.json\n\n";
  for (const Json& c : case_json) {
    if (c.contains("first_error")) {
      std::cerr << "api_bench: " << c["case"].get<std::string>()
                << " first error: " << c["first_error"].get<std::string>() << "\n";
    }
  }
  std::cout << md.str() << std::flush;
  return 0;
}

}  // namespace dhp::bench
