// How dhpctl prints API objects: readable tables by default, or the proto as JSON or YAML
// (-o json|yaml) for scripts. Pure functions of their inputs; thread-safe.
#ifndef DHP_API_DHPCTL_OUTPUT_H_
#define DHP_API_DHPCTL_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

enum class Format { kTable, kJson, kYaml };

// Aligned columns, a header row in capitals, two spaces between columns.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// "3s", "5m", "2h", "4d" since `micros` (relative to now_micros); "-" for 0.
std::string Age(int64_t micros, int64_t now_micros);
// "vision sequence x2 (zero-1), text tensor x2, dp 1, collocate".
std::string LayoutSummary(const v1::JobSpec& spec);

std::string JobsTable(const std::vector<v1::Job>& jobs, int64_t now_micros);
std::string JobDetail(const v1::GetJobResponse& resp, int64_t now_micros);
std::string NodesTable(const std::vector<v1::Node>& nodes, int64_t now_micros);
// A job's checkpoints: ID, STEP, STATE, ATTEMPT, SIZE, SHARDS (reported/world), WRITE (slowest
// shard, seconds), CREATED, PATH; then a note line per CORRUPT one with its reason.
// "(none)" when there are none.
std::string CheckpointsTable(const v1::GetJobResponse& resp);
// Where a run's ranks are: "node-a gpu 0-3, node-b gpu 0-1" ("-" before it is placed).
std::string PlacementSummary(const v1::Run& run);
// "0.4s", "59.0s", "1:05", "1:02:03"; "-" for 0.
std::string Seconds(double seconds);
// What `dhpctl drain` prints: the node cordoned and the jobs asked to checkpoint and stop.
std::string DrainSummary(const v1::DrainNodeResponse& resp);
std::string EventLine(const v1::Event& event);

// The message as JSON (proto JSON mapping) or YAML, for -o json|yaml.
std::string Structured(const google::protobuf::Message& msg, Format format);
// One-line JSON, for streams (-o json with watch/events).
std::string ProtoToJsonLine(const google::protobuf::Message& msg);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_OUTPUT_H_
