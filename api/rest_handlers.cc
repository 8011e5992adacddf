// The REST handlers that build their request from the query or the body's format: SubmitJob
// (JSON or YAML), ListJobs, GetLogs and WatchJob (a stream of JSON lines); and the helpers of
// api/rest_router.h.
#include <atomic>
#include <chrono>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/rest_router.h"
#include "common/proto_enum.h"
#include "common/utf8.h"

namespace dhp::api {
namespace rest_internal {

absl::Status SetFromPath(const char* field, std::string* value, const std::string& id) {
  if (!value->empty() && *value != id) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the body says \"", CutUtf8(*value, 200), "\" and the path \"",
        CutUtf8(id, 200), "\"; leave it out of the body or make them agree"));
  }
  *value = id;
  return absl::OkStatus();
}

void SendError(HttpResponder& responder, const absl::Status& status,
               const HttpHeaders& headers) {
  responder.Respond(static_cast<http::status>(HttpStatusFor(status.code())), kJson,
                    StatusToJson(status) + "\n", headers);
}

std::optional<BodyFormat> FormatOrRespond(const HttpRequest& request, HttpResponder& responder,
                                          bool yaml_allowed) {
  if (request.body().empty()) return BodyFormat::kJson;
  const auto raw = request[http::field::content_type];
  absl::StatusOr<BodyFormat> format =
      BodyFormatOf(std::string_view(raw.data(), raw.size()), yaml_allowed);
  if (format.ok()) return *format;
  responder.Respond(http::status::unsupported_media_type, kJson,
                    StatusToJson(format.status()) + "\n");
  return std::nullopt;
}

absl::Status CheckUtf8(const std::string& what, const std::string& text) {
  const std::string bad = Utf8Error(text);
  if (bad.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", bad));
}

absl::StatusOr<bool> ParseBoolParam(const std::string& name, const std::string& value) {
  const std::string v = absl::AsciiStrToLower(value);
  // No empty value (`?pretty`, `?pretty=`): the document declares a boolean, and a client
  // that means false by it should not get true.
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("query parameter ", name, ": expected true or false, got \"", value, "\""));
}

}  // namespace rest_internal

namespace {

using Clock = std::chrono::steady_clock;
using rest_internal::ParseBoolParam;
using rest_internal::ParseIntParam;
using rest_internal::SendError;

// A sink that writes one JSON line per event into a chunked response.
class NdjsonSink final : public EventSink {
 public:
  explicit NdjsonSink(HttpResponder& responder) : responder_(responder), start_(Clock::now()) {}

  bool Write(const v1::Event& event) override {
    std::string line = ProtoToJson(event);
    line += '\n';
    std::lock_guard<std::mutex> lock(mu_);
    return StartLocked() && responder_.WriteChunk(line);
  }

  bool IsCancelled() const override {
    if (responder_.ClientGone()) return true;
    // The service is waiting for events: send the headers so that the client sees the
    // stream is open (curl shows nothing until then).
    if (!started_.load() && Clock::now() - start_ > std::chrono::milliseconds(50)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!StartLocked()) return true;
    }
    return false;
  }

  // After WatchJob returned `status`.
  void Finish(const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_.load()) {
      if (!status.ok()) return SendError(responder_, status);
      StartLocked();
    } else if (!status.ok() && !responder_.ClientGone()) {
      responder_.WriteChunk("{\"error\": " + StatusToJson(status) + "}\n");
    }
    responder_.EndStream();
  }

 private:
  bool StartLocked() const {
    if (started_.load()) return true;
    started_.store(true);
    return responder_.BeginStream(http::status::ok, "application/x-ndjson",
                                  {{"Cache-Control", "no-cache"}});
  }

  HttpResponder& responder_;
  const Clock::time_point start_;
  mutable std::mutex mu_;  // guards sending the headers exactly once, and event order
  mutable std::atomic<bool> started_{false};
};

}  // namespace

void RestGateway::Router::SubmitJob(Call& c) {
  const std::optional<BodyFormat> format =
      rest_internal::FormatOrRespond(c.request, c.responder, true);
  if (!format) return;
  Unary(c, &DhpService::SubmitJob, [&](v1::SubmitJobRequest& req) {
    const std::string& body = c.request.body();
    if (*format == BodyFormat::kYaml) {
      // The spec is read where every spec is (spec_text); bytes that are not UTF-8 are
      // refused here, naming the field, since gRPC could not carry them in spec_text.
      if (!Utf8Error(body).empty()) {
        v1::JobSpec spec;
        const absl::Status s = ParseProtoYaml(body, &spec);
        return absl::InvalidArgumentError(absl::StrCat("request body (YAML): ", s.message()));
      }
      req.set_spec_text(body);
    } else {
      absl::Status s = ParseJsonBody(body, &req);
      if (!s.ok()) return s;
    }
    for (const auto& [key, value] : c.query) {
      if (key != "dry_run") continue;
      absl::StatusOr<bool> dry_run = ParseBoolParam(key, value);
      if (!dry_run.ok()) return dry_run.status();
      req.set_dry_run(*dry_run);
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::ListJobs(Call& c) {
  Unary(c, &DhpService::ListJobs, [&](v1::ListJobsRequest& req) {
    for (const auto& [key, value] : c.query) {
      if (key == "state") {
        for (absl::string_view piece : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
          piece = absl::StripAsciiWhitespace(piece);
          const std::optional<int> state =
              ParseEnumName(v1::JobState_descriptor(), std::string(piece));
          if (!state.has_value() || *state == v1::JOB_STATE_UNSPECIFIED) {
            return absl::InvalidArgumentError(
                absl::StrCat("query parameter state: unknown job state \"", piece, "\"; one of ",
                             EnumChoices(v1::JobState_descriptor())));
          }
          req.add_states(static_cast<v1::JobState>(*state));
        }
      } else if (key == "label") {
        const size_t eq = value.find('=');
        if (eq == std::string::npos || eq == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "query parameter label: expected key=value (e.g. label=team=vision), got \"", value,
              "\""));
        }
        (*req.mutable_labels())[value.substr(0, eq)] = value.substr(eq + 1);
      } else if (key == "page_size") {
        absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, value);
        if (!n.ok()) return n.status();
        req.set_page_size(*n);
      } else if (key == "page_token") {
        req.set_page_token(value);
      } else if (key == "owner") {
        req.set_owner(value);
      }
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::GetLogs(Call& c) {
  // Only the parsing is here: the checks of the values are the controller's, for both
  // transports (Controller::GetLogs).
  Unary(c, &DhpService::GetLogs, [&](v1::GetLogsRequest& req) {
    req.set_job_id(c.id);
    for (const auto& [key, value] : c.query) {
      if (key == "attempt" || key == "max_bytes") {
        absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, value);
        if (!n.ok()) return n.status();
        key == "attempt" ? req.set_attempt(*n) : req.set_max_bytes(*n);
      } else if (key == "rank" || key == "offset") {
        for (absl::string_view piece : absl::StrSplit(value, ',')) {
          const std::string item(absl::StripAsciiWhitespace(piece));
          if (key == "rank") {
            absl::StatusOr<int32_t> n = ParseIntParam<int32_t>(key, item);
            if (!n.ok()) return n.status();
            req.add_ranks(*n);
          } else {
            absl::StatusOr<int64_t> n = ParseIntParam<int64_t>(key, item);
            if (!n.ok()) return n.status();
            req.add_offsets(*n);
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

void RestGateway::Router::Watch(Call& c, const std::string& job_id) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  for (const auto& [key, value] : c.query) {
    if (key == "after") {
      absl::StatusOr<int64_t> after = ParseIntParam<int64_t>(key, value);
      if (!after.ok()) return SendError(c.responder, after.status());
      req.set_after_event_id(*after);
    } else if (key == "follow") {
      absl::StatusOr<bool> follow = ParseBoolParam(key, value);
      if (!follow.ok()) return SendError(c.responder, follow.status());
      req.set_follow(*follow);
    }
  }
  NdjsonSink sink(c.responder);
  *c.reached_service = true;
  const absl::Status status = authz_.Watch(c.authorization, req, sink);
  sink.Finish(status);
}

}  // namespace dhp::api
