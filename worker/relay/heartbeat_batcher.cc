#include "worker/relay/heartbeat_batcher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/heartbeat_limits.h"
#include "api/service.h"
#include "common/proto_wire_budget.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace dhp::worker {

namespace {

// The controller receives at most 16 MiB in one request; a batch stays well below.
constexpr int64_t kMaxBatchBytesLimit = int64_t{12} << 20;

}  // namespace

absl::Status Validate(const HeartbeatBatcherOptions& o) {
  auto bad = [](const char* name, int64_t value, const std::string& bounds) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", value, " must be ", bounds));
  };
  if (o.max_batch < 1 || o.max_batch > api::kMaxHeartbeatBatch) {
    return bad("max_batch", o.max_batch, "in 1..1024");
  }
  if (o.max_batch_bytes < 1 || o.max_batch_bytes > kMaxBatchBytesLimit) {
    return bad("max_batch_bytes", o.max_batch_bytes, absl::StrCat("in 1..", kMaxBatchBytesLimit));
  }
  if (o.max_batch_elements < 1 || o.max_batch_elements > api::kMaxRequestElements) {
    return bad("max_batch_elements", o.max_batch_elements,
               absl::StrCat("in 1..", api::kMaxRequestElements));
  }
  if (o.window_ms < 0 || o.window_ms > 1000) return bad("window_ms", o.window_ms, "in 0..1000");
  if (o.senders < 1 || o.senders > 64) return bad("senders", o.senders, "in 1..64");
  if (o.max_queued < 1) return bad("max_queued", o.max_queued, "at least 1");
  return absl::OkStatus();
}

int64_t HeartbeatBatchBytes(const std::string& authorization, int64_t heartbeat_bytes) {
  using google::protobuf::io::CodedOutputStream;
  // RelayedHeartbeat: authorization = 1 (absent when empty), heartbeat = 2 (always present);
  // each field a one-byte tag and a varint length. HeartbeatBatchRequest.heartbeats = 1 wraps
  // it the same way.
  const size_t hb = static_cast<size_t>(heartbeat_bytes);
  size_t entry = 1 + CodedOutputStream::VarintSize64(hb) + hb;
  if (!authorization.empty()) {
    entry += 1 + CodedOutputStream::VarintSize64(authorization.size()) + authorization.size();
  }
  return static_cast<int64_t>(1 + CodedOutputStream::VarintSize64(entry) + entry);
}

int64_t HeartbeatBatchElements(const std::string& authorization,
                               const std::string& heartbeat_wire, int64_t limit) {
  // The RelayedHeartbeat, its `heartbeat` and (when not empty) its `authorization`.
  const int64_t own = authorization.empty() ? 2 : 3;
  google::protobuf::io::ArrayInputStream in(heartbeat_wire.data(),
                                            static_cast<int>(heartbeat_wire.size()));
  return own + CountWireElements(&in, *v1::HeartbeatRequest::descriptor(), limit - own);
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

HeartbeatBatcher::HeartbeatBatcher(api::DhpClient& controller, HeartbeatBatcherOptions options,
                                   HeartbeatBatcherObserver* observer)
    : controller_(controller), options_(options), observer_(observer) {
  for (int i = 0; i < options_.senders; ++i) senders_.emplace_back([this] { SendLoop(); });
}

HeartbeatBatcher::~HeartbeatBatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : senders_) t.join();
}

void HeartbeatBatcher::Submit(std::string authorization, v1::HeartbeatRequest heartbeat,
                              Answer answer) {
  if (absl::Status invalid = api::CheckHeartbeatLimits(heartbeat); !invalid.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.invalid;
    }
    if (observer_ != nullptr) observer_->OnAnswer(invalid.code(), 0.0);
    answer(invalid, v1::HeartbeatResponse());
    return;
  }
  // Counted on the wire, as the controller counts the batch (under 4 MiB: the relay's own
  // receive limit).
  const std::string wire = heartbeat.SerializeAsString();
  const int64_t bytes = HeartbeatBatchBytes(authorization, static_cast<int64_t>(wire.size()));
  const int64_t elements =
      HeartbeatBatchElements(authorization, wire, options_.max_batch_elements);
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_ || static_cast<int>(queue_.size()) >= options_.max_queued) {
    const bool full = !stopping_;
    ++stats_.refused;
    lock.unlock();
    const absl::Status refusal =
        full ? absl::ResourceExhaustedError(absl::StrCat(
                   "the relay holds ", options_.max_queued,
                   " heartbeats already; send to the controller directly"))
             : absl::UnavailableError("the relay is shutting down");
    if (observer_ != nullptr) observer_->OnAnswer(refusal.code(), 0.0);
    answer(refusal, v1::HeartbeatResponse());
    return;
  }
  const int progress = heartbeat.progress_size();
  queue_.push_back({std::chrono::steady_clock::now(), std::move(authorization),
                    std::move(heartbeat), std::move(answer), bytes, elements, progress});
  queued_bytes_ += bytes;
  queued_elements_ += elements;
  queued_progress_ += progress;
  const bool wake = queue_.size() == 1 || FullLocked();
  lock.unlock();
  if (wake) cv_.notify_one();
}

HeartbeatBatcherStats HeartbeatBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t HeartbeatBatcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void HeartbeatBatcher::Answered(const Pending& p, const absl::Status& s) {
  if (observer_ != nullptr) observer_->OnAnswer(s.code(), SecondsSince(p.arrived));
}

bool HeartbeatBatcher::FullLocked() const {
  return static_cast<int>(queue_.size()) >= options_.max_batch ||
         queued_bytes_ >= options_.max_batch_bytes ||
         queued_elements_ >= options_.max_batch_elements ||
         queued_progress_ >= api::kMaxBatchProgress;
}

void HeartbeatBatcher::SendLoop() {
  while (true) {
    std::vector<Pending> batch = Take();
    if (batch.empty()) return;
    Send(std::move(batch));
  }
}

std::vector<HeartbeatBatcher::Pending> HeartbeatBatcher::Take() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto full = [this] { return FullLocked(); };
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};  // stopping, nothing left
    const auto due = queue_.front().arrived + std::chrono::milliseconds(options_.window_ms);
    cv_.wait_until(lock, due, [&] { return stopping_ || full() || queue_.empty(); });
    if (queue_.empty()) continue;  // another sender took them
    if (!stopping_ && !full() && std::chrono::steady_clock::now() < due) continue;
    // The oldest heartbeats, as many as fit; the first always does (it is at most the relay's
    // own 4 MiB receive limit, within what the controller receives).
    std::vector<Pending> batch;
    int64_t bytes = 0;
    int64_t elements = 0;
    int64_t progress = 0;
    while (!queue_.empty() && static_cast<int>(batch.size()) < options_.max_batch) {
      const Pending& next = queue_.front();
      if (!batch.empty() && (bytes + next.bytes > options_.max_batch_bytes ||
                             elements + next.elements > options_.max_batch_elements ||
                             progress + next.progress > api::kMaxBatchProgress)) {
        break;
      }
      bytes += next.bytes;
      elements += next.elements;
      progress += next.progress;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    queued_bytes_ -= bytes;
    queued_elements_ -= elements;
    queued_progress_ -= progress;
    if (!queue_.empty()) cv_.notify_one();  // the rest are another sender's
    return batch;
  }
}

void HeartbeatBatcher::Send(std::vector<Pending> batch) {
  v1::HeartbeatBatchRequest req;
  req.mutable_heartbeats()->Reserve(static_cast<int>(batch.size()));
  for (Pending& p : batch) {
    v1::RelayedHeartbeat* entry = req.add_heartbeats();
    entry->set_authorization(std::move(p.authorization));
    *entry->mutable_heartbeat() = std::move(p.heartbeat);
  }
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<v1::HeartbeatBatchResponse> resp = controller_.HeartbeatBatch(req);
  absl::Status failed = resp.status();
  if (failed.ok() && resp->answers_size() != static_cast<int>(batch.size())) {
    failed = absl::InternalError(absl::StrCat("the controller answered ", resp->answers_size(),
                                              " of ", batch.size(), " relayed heartbeats"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.heartbeats += static_cast<int64_t>(batch.size());
    ++stats_.batches;
    if (!failed.ok()) ++stats_.failed_batches;
  }
  if (observer_ != nullptr) {
    observer_->OnBatch(static_cast<int>(batch.size()), SecondsSince(started), failed.code());
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!failed.ok()) {
      Answered(batch[i], failed);
      batch[i].answer(failed, v1::HeartbeatResponse());
      continue;
    }
    v1::HeartbeatAnswer* a = resp->mutable_answers(static_cast<int>(i));
    const absl::Status s = a->code() == 0
                               ? absl::OkStatus()
                               : absl::Status(static_cast<absl::StatusCode>(a->code()),
                                              a->message());
    Answered(batch[i], s);
    batch[i].answer(s, s.ok() ? std::move(*a->mutable_response()) : v1::HeartbeatResponse());
  }
}

}  // namespace dhp::worker
