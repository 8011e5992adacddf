// Discovery of what this host offers to dhp: GPUs (through nvidia-smi, when present), CPU
// slots and memory. Thread-safe (no state).
#ifndef DHP_WORKER_AGENT_RESOURCES_H_
#define DHP_WORKER_AGENT_RESOURCES_H_

#include <string>

#include "dhp/v1/node.pb.h"

namespace dhp::worker {

// Parses `nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`
// output (memory in MiB). Lines that do not parse are skipped.
v1::NodeResources ParseNvidiaSmi(const std::string& csv);

// GPUs from nvidia-smi (none when it is absent or fails), `cpu_slots` CPU slots (<= 0: one
// per online CPU when there is no GPU, else 0), total memory from /proc/meminfo.
v1::NodeResources DetectResources(int cpu_slots);

std::string LocalHostname();

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_RESOURCES_H_
