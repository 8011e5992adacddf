// grpc_floor_server: what gRPC alone costs per heartbeat, under dhp-controller's figures.
//
// A gRPC server with WorkerService.RegisterNode and Heartbeat only, built the way
// api/grpc_server.cc builds dhp-controller's (raw callback methods, the request decoded from
// its bytes, the answer serialized), that keeps no state and does no work: every node is
// registered, every heartbeat is answered at once. control_plane_bench runs it as it runs a
// controller (`--controller floor:bazel-bin/bench/grpc_floor_server`, an "empty" case): it
// takes the controller's --data-dir, --grpc-port, --http-port and --port-file, and every other
// method is UNIMPLEMENTED, so the case's node, job and event queries fail and only its traffic
// figures (CPU per heartbeat, latency, threads, RSS) mean anything.
//
//   --hops 0   the answer is serialized and finished on gRPC's thread that decoded the call;
//   --hops 1   the call goes to a loop thread (a Boost.Asio io_context), which finishes it;
//   --hops 2   as in dhp-controller: the call goes to a loop thread (a Boost.Asio io_context)
//              and from there to a finisher thread (common/serial_worker.h), which serializes
//              and finishes it. The difference is the cost of the two hand-offs.
//   --launch-ranks K   every heartbeat is answered with K RankLaunch of one job for that node,
//              so that the simulated agents report K running ranks in each heartbeat and relay
//              their progress (each relayed report answered with next_report_ms, as the
//              controller paces 80,000 ranks): the messages of a "full" case, with no work.
//
// The HTTP port is a listening socket that is never served (the bench reads it, and scrapes
// only when asked).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "common/serial_worker.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace dhp::bench {
namespace {

struct FloorOptions {
  int hops = 2;
  int launch_ranks = 0;
  int next_report_ms = 20000;  // dhp-controller's pace at 80,000 ranks and 4,000 reports/s
};

using RawWorker = v1::WorkerService::WithRawCallbackMethod_RegisterNode<
    v1::WorkerService::WithRawCallbackMethod_Heartbeat<v1::WorkerService::Service>>;

template <typename Msg>
bool Decode(const grpc::ByteBuffer& bytes, Msg* msg) {
  grpc::ByteBuffer copy(bytes);
  grpc::ProtoBufferReader reader(&copy);
  return msg->ParseFromZeroCopyStream(&reader);
}

template <typename Msg>
void Answer(grpc::ServerUnaryReactor* reactor, const Msg& msg, grpc::ByteBuffer* out) {
  bool own = false;
  reactor->Finish(grpc::SerializationTraits<Msg>::Serialize(msg, out, &own));
}

class FloorService final : public RawWorker {
 public:
  explicit FloorService(FloorOptions o) : o_(o), work_(io_.get_executor()) {
    loop_ = std::thread([this] { io_.run(); });
  }
  ~FloorService() override {
    work_.reset();
    loop_.join();
    finisher_.Stop();
  }

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* in,
                                         grpc::ByteBuffer* out) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    v1::RegisterNodeRequest req;
    if (!Decode(*in, &req)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a request"));
      return reactor;
    }
    v1::RegisterNodeResponse resp;
    resp.set_node_id(req.node().id().empty() ? req.node().hostname() : req.node().id());
    resp.set_heartbeat_interval_ms(2000);
    Answer(reactor, resp, out);
    return reactor;
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    auto req = std::make_shared<v1::HeartbeatRequest>();
    if (!Decode(*in, req.get())) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a request"));
      return reactor;
    }
    if (o_.hops == 0) {
      Answer(reactor, Respond(*req), out);
      return reactor;
    }
    boost::asio::post(io_, [this, reactor, req, out] {
      auto resp = std::make_shared<v1::HeartbeatResponse>(Respond(*req));
      auto finish = [reactor, resp, out] { Answer(reactor, *resp, out); };
      if (o_.hops == 1) {
        finish();  // on the loop thread
      } else {
        finisher_.Post(std::move(finish));
      }
    });
    return reactor;
  }

 private:
  v1::HeartbeatResponse Respond(const v1::HeartbeatRequest& req) const {
    v1::HeartbeatResponse resp;
    for (int w = 0; w < o_.launch_ranks; ++w) {
      v1::RankLaunch* l = resp.add_ranks();
      l->set_job_id("j-floor-" + req.node_id());
      l->set_attempt(1);
      l->set_world_rank(w);
      l->set_world_size(o_.launch_ranks);
      l->set_slot(w);
      l->set_gpu(w);
      l->set_preemption_grace_s(60);
    }
    for (int k = 0; k < req.progress_size(); ++k) {
      resp.add_progress()->mutable_response()->set_next_report_ms(o_.next_report_ms);
    }
    return resp;
  }

  const FloorOptions o_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread loop_;
  SerialWorker finisher_{"floor-finish"};
};

// A listening TCP socket on a kernel-chosen loopback port, never accepted on; its port or -1.
int HoldPort(int* fd) {
  *fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (*fd < 0 || ::bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(*fd, 1) != 0 || ::getsockname(*fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  return ntohs(a.sin_port);
}

int Main(int argc, char** argv) {
  FloorOptions o;
  std::string data_dir, port_file;
  int grpc_port = 0, http_port = 0;
  CLI::App app{"grpc_floor_server: WorkerService.RegisterNode and Heartbeat answered with no "
               "work, as a floor under dhp-controller's per-heartbeat cost"};
  app.add_option("--hops", o.hops, "0: answer on gRPC's thread; 1: on a loop; 2: via a loop and a finisher")
      ->check(CLI::IsMember({0, 1, 2}));
  app.add_option("--launch-ranks", o.launch_ranks, "RankLaunch per heartbeat answer")
      ->check(CLI::Range(0, 64));
  app.add_option("--next-report-ms", o.next_report_ms, "Pace asked of relayed reports")
      ->check(CLI::NonNegativeNumber);
  std::vector<std::string> channel_args;
  app.add_option("--channel-arg", channel_args,
                 "NAME=INT gRPC channel argument of the server (repeatable), e.g. "
                 "grpc.http2.bdp_probe=0")
      ->check([](const std::string& s) {
        absl::StatusOr<ChannelArg> arg = ParseChannelArg(s);
        if (!arg.ok()) return std::string(arg.status().message());
        return arg->label.empty() ? std::string() : "no LABEL: here, got \"" + s + "\"";
      });
  app.add_option("--data-dir", data_dir, "Ignored (the controller's flag)");
  app.add_option("--grpc-port", grpc_port, "gRPC port on 127.0.0.1; 0: kernel-chosen");
  app.add_option("--http-port", http_port, "Ignored: the HTTP port is always kernel-chosen");
  app.add_option("--port-file", port_file, "Written once listening: {grpc_port, http_port}");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before any thread starts: sigwait below

  FloorService service(o);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(grpc_port),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(16 << 20);
  for (const std::string& s : channel_args) {
    absl::StatusOr<ChannelArg> arg = ParseChannelArg(s);  // checked when parsed
    if (arg.ok()) builder.AddChannelArgument(arg->name, arg->value);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  int http_fd = -1;
  const int held = HoldPort(&http_fd);
  if (server == nullptr || port == 0 || held < 0) {
    std::cerr << "grpc_floor_server: cannot listen\n";
    return 1;
  }
  if (!port_file.empty()) {
    std::ofstream(port_file + ".tmp") << "{\"grpc_port\": " << port << ", \"http_port\": "
                                      << held << "}\n";
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }
  std::cerr << "grpc_floor_server: gRPC on 127.0.0.1:" << port << ", hops " << o.hops
            << ", " << o.launch_ranks << " ranks launched per node\n";
  int sig = 0;
  sigwait(&stop, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ::close(http_fd);
  return 0;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) { return dhp::bench::Main(argc, argv); }
