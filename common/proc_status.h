// This process's /proc/self/status fields in bytes ("VmRSS", "VmHWM": resident memory now and
// its high-water mark), for memory tests and benchmarks. Linux only; -1 when the field is absent
// or the file unreadable. Thread-safe.
#ifndef DHP_COMMON_PROC_STATUS_H_
#define DHP_COMMON_PROC_STATUS_H_

#include <cstdint>
#include <string>

namespace dhp {

int64_t ProcSelfStatusBytes(const std::string& field);

}  // namespace dhp

#endif  // DHP_COMMON_PROC_STATUS_H_
