// HttpClient: a small blocking HTTP/1.1 client (Boost.Beast) for tests that talk to the REST
// gateway over a real socket.
//
// One keep-alive connection to host:port, opened in the constructor. Send reads the whole
// response; StartStream/FinishStream read a streamed (chunked) response piece by piece, e.g.
// the ndjson lines of a watch. Reads time out after `timeout_ms` instead of hanging a test.
// Transport failures do not throw: they come back as status 0 with the error in `error`.
//
// Thread-safety: none; use one client per thread.
#ifndef DHP_TESTS_HTTP_CLIENT_H_
#define DHP_TESTS_HTTP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dhp::tests {

struct HttpResponse {
  int status = 0;            // 0: the request failed on the wire (see error)
  std::string content_type;
  std::string body;
  std::string error;
};

class HttpClient {
 public:
  explicit HttpClient(uint16_t port, const std::string& host = "127.0.0.1",
                      int timeout_ms = 15000);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `method` is "GET", "POST", ...; the body is sent with `content_type` when not empty.
  HttpResponse Send(const std::string& method, const std::string& target,
                    const std::string& body = "",
                    const std::string& content_type = "application/json");
  HttpResponse Get(const std::string& target) { return Send("GET", target); }
  HttpResponse Post(const std::string& target, const std::string& body = "",
                    const std::string& content_type = "application/json") {
    return Send("POST", target, body, content_type);
  }

  // Sends a GET and reads the headers and then the body until it holds at least `lines`
  // newline-terminated lines or the response ends. The stream stays open.
  HttpResponse StartStream(const std::string& target, int lines);
  // Reads more of the stream started by StartStream, until the body holds `lines` lines
  // (counting from the start of the body) or the response ends; lines < 0: to the end.
  HttpResponse ReadStream(int lines = -1);

  // Closes the connection (a streaming server sees its client go away).
  void Close();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The newline-terminated lines of `text`, without the newlines (a trailing partial line is
// left out).
std::vector<std::string> Lines(const std::string& text);

}  // namespace dhp::tests

#endif  // DHP_TESTS_HTTP_CLIENT_H_
