// HttpConnection: a minimal blocking HTTP/1.1 client over one keep-alive TCP connection, for
// load generators (bench/api_bench.cc). It sends one request at a time and reads the whole
// response (Content-Length or chunked) with Boost.Beast's parser; no TLS, no redirects, no
// pipelining.
//
// If the server closes the connection (or a read/write fails), the failed call returns an
// error and the next call reconnects, so a load loop only has to count errors. reconnects()
// tells how often that happened: a benchmark of persistent connections expects 0.
//
// Thread-safety: not thread-safe; use one HttpConnection per thread.
#ifndef DHP_BENCH_HTTP_LOAD_H_
#define DHP_BENCH_HTTP_LOAD_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dhp::bench {

struct HttpResult {
  int status = 0;     // HTTP status code
  std::string body;
};

class HttpConnection {
 public:
  // Does not connect until Connect() or the first request.
  HttpConnection(std::string host, uint16_t port);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Opens the TCP connection (TCP_NODELAY) if it is not open. UNAVAILABLE naming host:port.
  absl::Status Connect();
  // GET/POST/... `target` ("/v1/jobs/j-1"). An empty `content_type` sends no Content-Type.
  // Transport failures are UNAVAILABLE; any HTTP status is a successful result.
  absl::StatusOr<HttpResult> Request(std::string_view method, std::string_view target,
                                     std::string_view content_type = {},
                                     std::string_view body = {});

  int64_t connects() const { return connects_; }
  // Connections opened after the first one: the server closed on us, or a call failed.
  int64_t reconnects() const { return connects_ > 0 ? connects_ - 1 : 0; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t connects_ = 0;
};

// One request on a fresh connection (for side channels such as /metrics). A `timeout` above
// zero bounds the whole exchange (connect, send, read): past it the call gives up with
// DEADLINE_EXCEEDED, so that a server that stops answering cannot hang the caller.
absl::StatusOr<HttpResult> HttpFetch(const std::string& host, uint16_t port,
                                     std::string_view method, std::string_view target,
                                     std::chrono::milliseconds timeout = {});

}  // namespace dhp::bench

#endif  // DHP_BENCH_HTTP_LOAD_H_
