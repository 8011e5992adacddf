// CRC-32C (Castagnoli): the checksum checkpoint shards are reported and verified with (iSCSI,
// ext4, LevelDB, gRPC use the same polynomial). Reflected polynomial 0x82F63B78, initial value
// and final xor 0xFFFFFFFF; "123456789" -> e3069283.
//
// Two implementations, same results bit for bit (and kHardwareOneStream, the instruction on
// one stream, to compare with):
//   kTable     slicing by 8 (eight table lookups per eight bytes, tables built at compile
//              time); any CPU, about 2 GB/s on one core.
//   kHardware  the CPU's CRC32C instruction (x86-64 SSE4.2 `crc32`, ARMv8 CRC32CX), eight bytes
//              per instruction on three interleaved streams whose CRCs are then combined;
//              close to memory speed (bench/results/crc32c.md: 9x the table on 64 MiB). On
//              x86-64 only these functions are compiled for SSE4.2 (a target attribute), so the
//              build needs no -msse4.2.
// Crc32cExtend picks kHardware once, at first use, where the CPU has the instruction
// (__builtin_cpu_supports on x86-64; at compile time on ARMv8 with +crc), else kTable.
// Crc32cExtendWith names one, for tests and bench/crc32c_bench.cc.
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_CKPT_CRC32C_H_
#define DHP_WORKER_CKPT_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace dhp::ckpt {

enum class Crc32cImpl {
  kTable,             // slicing by 8, any CPU
  kHardwareOneStream, // the CRC32C instruction on one stream (latency-bound), for comparison
  kHardware,          // the CRC32C instruction on three interleaved streams
};

// "table", "hardware-1-stream", "hardware".
const char* Crc32cImplName(Crc32cImpl impl);

// Whether this CPU (and this build) can run `impl`: kTable always; the hardware ones on x86-64
// with SSE4.2 and on ARMv8 builds with the CRC extension.
bool Crc32cAvailable(Crc32cImpl impl);

// The implementation Crc32cExtend uses: kHardware where available, else kTable.
Crc32cImpl Crc32cDefaultImpl();

// The CRC-32C of `crc`'s message followed by data[0, n): Crc32cExtend(Crc32c(a), b) ==
// Crc32c(a + b). Start from 0 for a new message.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// Crc32cExtend computed by `impl`, which must be available (Crc32cAvailable): asking for one
// this CPU lacks is a bug and aborts with a message.
uint32_t Crc32cExtendWith(Crc32cImpl impl, uint32_t crc, const void* data, size_t n);

// Eight lower-case hex digits, e.g. "e3069283" (the form CheckpointShard.crc32c carries).
std::string Crc32cHex(uint32_t crc);

}  // namespace dhp::ckpt

#endif  // DHP_WORKER_CKPT_CRC32C_H_
