// What identities cost the controller per call (issue 14 §4): TokenAuth::Authenticate for each
// kind of token, and Authorizer::Call around a service that answers at once, against calling
// the service directly, side by side in one run. Also counts, exactly, the extra service calls
// the checks make (a user's ownership lookups).
//
//   bazel run //bench:auth_bench -- --calls 200000 --rounds 5
//
// Prints a Markdown table last and writes bench/results/auth.{md,json}.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "api/authz.h"
#include "api/fake_owners_service.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

struct Row {
  std::string what;
  double ns_per_call = 0;       // median over rounds
  double ratio = 0;             // to the direct call of the same method (0: not applicable)
  double service_calls = 0;     // service calls per API call
};

// Median ns per call of `body` over `rounds` rounds of `calls` calls.
double TimeNs(int calls, int rounds, const std::function<void()>& body) {
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) body();
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    ns.push_back(d.count() / calls);
  }
  return Median(ns);
}

int Main(int argc, char** argv) {
  int calls = 200000;
  int rounds = 5;
  std::string out_dir = "bench/results";
  CLI::App app{"auth_bench: the cost of authentication and authorization per API call"};
  app.add_option("--calls", calls, "Calls per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--out-dir", out_dir, "Where auth.md and auth.json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"); ws && out_dir[0] != '/') {
    out_dir = std::string(ws) + "/" + out_dir;
  }

  api::AuthSettings settings;
  settings.admin_token = "admin-token-0123456789abcdef";
  for (int i = 0; i < 1000; ++i) {  // a thousand users and nodes: lookups stay O(log n)
    settings.users.push_back({"user" + std::to_string(i), api::Role::kUser,
                              api::Sha256Hex("user-token-" + std::to_string(i))});
    settings.nodes.push_back({"node" + std::to_string(i),
                              api::Sha256Hex("node-token-" + std::to_string(i))});
  }
  settings.users.push_back({"alice", api::Role::kUser, api::Sha256Hex("alice-token")});
  settings.rank_key = std::string(32, 'k');
  const api::TokenAuth auth = *api::TokenAuth::Create(settings);
  const std::string rank = "Bearer " + auth.RankToken("j-1", 1);
  api::FakeOwnersService service;  // answers at once; counts calls
  service.record_names = false;
  service.owner_of = {{"j-1", "alice"}};
  api::Authorizer authz(auth, service);

  std::vector<Row> rows;
  auto authenticate = [&](const std::string& what, const std::string& header) {
    rows.push_back({"Authenticate: " + what,
                    TimeNs(calls, rounds, [&] { (void)auth.Authenticate(header); }), 0, 0});
  };
  authenticate("admin token", "Bearer " + settings.admin_token);
  authenticate("user token (1,001 users)", "Bearer alice-token");
  authenticate("node token (1,000 nodes)", "Bearer node-token-7");
  authenticate("rank token (HMAC-SHA256)", rank);
  authenticate("wrong token", "Bearer nobody");

  v1::GetJobRequest get;
  get.set_job_id("j-1");
  v1::KvSetRequest kv;
  kv.mutable_scope()->set_job_id("j-1");
  kv.mutable_scope()->set_attempt(1);
  kv.set_key("k");
  // Direct calls and calls through the Authorizer, side by side.
  auto measure = [&](const std::string& what, const std::function<void()>& direct,
                     const std::function<void()>& through) {
    const double d = TimeNs(calls, rounds, direct);
    service.calls = 0;
    const double t = TimeNs(calls, rounds, through);
    const double per_call = static_cast<double>(service.calls) / (1.0 * calls * rounds);
    rows.push_back({what + ": direct", d, 1.0, 1.0});
    rows.push_back({what + ": through Authorizer", t, t / d, per_call});
  };
  v1::GetJobResponse get_resp;
  v1::KvSetResponse kv_resp;
  measure(
      "GetJob by an admin", [&] { (void)service.GetJob(get, &get_resp); },
      [&] {
        (void)authz.Call("Bearer " + settings.admin_token, "GetJob", &api::DhpService::GetJob,
                         get, &get_resp);
      });
  measure(
      "GetJob by its owner (a user)", [&] { (void)service.GetJob(get, &get_resp); },
      [&] {
        (void)authz.Call("Bearer alice-token", "GetJob", &api::DhpService::GetJob, get,
                         &get_resp);
      });
  measure(
      "KvSet by a rank", [&] { (void)service.KvSet(kv, &kv_resp); },
      [&] { (void)authz.Call(rank, "KvSet", &api::DhpService::KvSet, kv, &kv_resp); });

  // Report.
  std::string md = "# Authentication and authorization per API call\n\n";
  md += "`bazel run //bench:auth_bench -- --calls " + std::to_string(calls) + " --rounds " +
        std::to_string(rounds) + "`, one thread, in process (no transport): the cost the\n" +
        "checks add to each call. Medians of the rounds; ratios side by side in this run.\n" +
        "The service here answers at once (a few ns), so the ratios are of the checks alone;\n" +
        "a real call also crosses gRPC or HTTP and the controller's loop (GetJob p50 about a\n" +
        "millisecond on loopback, bench/results/api.md). A user's job-scoped calls make one\n" +
        "extra GetJob (the owner's lookup): the service-calls column counts it exactly.\n\n";
  md += "| what | ns per call | ratio to direct | service calls per call |\n|---|---:|---:|---:|\n";
  nlohmann::json json = nlohmann::json::array();
  for (const Row& r : rows) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %.0f | %s | %s |\n", r.what.c_str(),
                  r.ns_per_call, r.ratio > 0 ? std::to_string(r.ratio).substr(0, 5).c_str() : "",
                  r.service_calls > 0 ? std::to_string(r.service_calls).substr(0, 4).c_str()
                                      : "");
    md += line;
    json.push_back({{"what", r.what}, {"ns_per_call", r.ns_per_call}, {"ratio", r.ratio},
                    {"service_calls_per_call", r.service_calls}});
  }
  std::printf("%s", md.c_str());
  std::ofstream(out_dir + "/auth.md") << md;
  std::ofstream(out_dir + "/auth.json") << json.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
