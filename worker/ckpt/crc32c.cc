#include "worker/ckpt/crc32c.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The hardware implementation: x86-64 with SSE4.2 (checked at run time; only the functions
// marked CRC32C_HW_TARGET are compiled for it), or little-endian ARMv8 built with +crc.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC32C_HW_X86 1
#define CRC32C_HW_TARGET __attribute__((target("sse4.2")))
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32) && \
    defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <arm_acle.h>
#define CRC32C_HW_ARM 1
#define CRC32C_HW_TARGET
#endif

namespace dhp::ckpt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

// Everything below works on the CRC register: the checksum without the initial and final
// inversion (crc = ~register). Feeding bytes into the register is linear over GF(2):
//   Feed(r, X || Y) = Feed(Feed(r, X), Y) = Shift(Feed(r, X), |Y|) ^ Feed(0, Y),
// where Shift(r, n) = Feed(r, n zero bytes) is r times x^(8n) modulo the polynomial. That is
// what lets three streams be checksummed independently and combined.

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0][b]: the CRC register after shifting byte b through it; tables[k][b]: the same byte
// followed by k zero bytes, so eight input bytes are folded with eight lookups.
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// kTable: slicing by 8.
uint32_t FeedTable(uint32_t c, const uint8_t* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t lo = c ^ LoadLe32(p);
    const uint32_t hi = LoadLe32(p + 4);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
        kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xffu];
  return c;
}

#if defined(CRC32C_HW_X86) || defined(CRC32C_HW_ARM)

// a * b modulo the polynomial, both in the reflected form of the register: bit 31 is the
// coefficient of x^0, bit 0 that of x^31. Multiplying by x is one zero bit fed in.
constexpr uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int k = 0; k < 32; ++k) {  // b holds (original b) * x^k
    if (a & (0x80000000u >> k)) product ^= b;
    b = (b >> 1) ^ ((b & 1u) ? kPolynomial : 0u);
  }
  return product;
}

// x^(8n) modulo the polynomial (n zero bytes fed into the register), by repeated squaring.
constexpr uint32_t XPow8n(size_t n) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t power = 0x00800000u;   // x^8
  for (; n > 0; n >>= 1, power = MulModP(power, power)) {
    if (n & 1u) result = MulModP(result, power);
  }
  return result;
}

// Shift(r, n) for one fixed n, four lookups: table[k][b] = (b << 8k) * x^(8n).
using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

constexpr ShiftTable MakeShiftTable(size_t n) {
  ShiftTable t{};
  const uint32_t x8n = XPow8n(n);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = MulModP(b << (8 * k), x8n);
  }
  return t;
}

inline uint32_t Shift(const ShiftTable& t, uint32_t r) {
  return t[0][r & 0xff] ^ t[1][(r >> 8) & 0xff] ^ t[2][(r >> 16) & 0xff] ^ t[3][r >> 24];
}

// Three streams of kLongBlock bytes per round while at least 3 * kLongBlock bytes are left,
// then of kMidBlock, then of kShortBlock, then one stream. The instruction has a latency of
// three cycles and a throughput of one per cycle, so three independent streams keep it busy;
// the combine (two Shifts) costs a few cycles per round. The long block size matters for
// buffers far larger than the caches: on the 2-core AMD EPYC of bench/results/crc32c.md, 64
// MiB ran at about 15 GB/s with 8 KiB blocks, 20 GB/s with 32 KiB and 19-23 GB/s with 64 KiB,
// against 21-25 GB/s for a plain read of the buffer; in cache, blocks of 4 KiB and up all run
// at the instruction's throughput (about 28 GB/s there), 256-byte blocks at about 21.
constexpr size_t kLongBlock = 65536;
constexpr size_t kMidBlock = 4096;
constexpr size_t kShortBlock = 256;
constexpr ShiftTable kShiftLong = MakeShiftTable(kLongBlock);
constexpr ShiftTable kShiftMid = MakeShiftTable(kMidBlock);
constexpr ShiftTable kShiftShort = MakeShiftTable(kShortBlock);

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // little-endian: p[0] is fed first, as the instruction does
  return v;
}

// Word: the register as the instruction takes it (64 bits on x86-64, so that the compiler
// keeps it in one register with no 32-bit moves between instructions; the upper half is 0).
#if defined(CRC32C_HW_X86)
using Word = uint64_t;
CRC32C_HW_TARGET inline Word Step8(Word c, const uint8_t* p) { return _mm_crc32_u64(c, Load64(p)); }
CRC32C_HW_TARGET inline uint32_t Step1(uint32_t c, uint8_t b) { return _mm_crc32_u8(c, b); }
#else
using Word = uint32_t;
inline Word Step8(Word c, const uint8_t* p) { return __crc32cd(c, Load64(p)); }
inline uint32_t Step1(uint32_t c, uint8_t b) { return __crc32cb(c, b); }
#endif

// Single bytes up to an 8-byte boundary of p, at most n of them.
CRC32C_HW_TARGET inline uint32_t FeedHead(uint32_t c, const uint8_t*& p, size_t& n) {
  for (; n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0; --n, ++p) c = Step1(c, *p);
  return c;
}

// kHardwareOneStream, and the tail of kHardware: one instruction after the other.
CRC32C_HW_TARGET uint32_t FeedHardwareOneStream(uint32_t c, const uint8_t* p, size_t n) {
  c = FeedHead(c, p, n);
  Word w = c;
  for (; n >= 8; n -= 8, p += 8) w = Step8(w, p);
  c = static_cast<uint32_t>(w);
  for (; n > 0; --n, ++p) c = Step1(c, *p);
  return c;
}

// As many rounds of three streams of kBlock bytes each as [p, p + n) holds; advances p and n
// past them. `shift` is MakeShiftTable(kBlock).
template <size_t kBlock>
CRC32C_HW_TARGET inline uint32_t FeedThreeStreams(uint32_t c, const uint8_t*& p, size_t& n,
                                                  const ShiftTable& shift) {
  static_assert(kBlock % 8 == 0, "blocks are whole 8-byte words");
  const uint8_t* q = p;
  for (size_t rounds = n / (3 * kBlock); rounds > 0; --rounds, q += 3 * kBlock) {
    Word a = c, b = 0, d = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      a = Step8(a, q + i);
      b = Step8(b, q + kBlock + i);
      d = Step8(d, q + 2 * kBlock + i);
    }
    c = Shift(shift, Shift(shift, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
        static_cast<uint32_t>(d);
  }
  n -= static_cast<size_t>(q - p);
  p = q;
  return c;
}

CRC32C_HW_TARGET uint32_t FeedHardware(uint32_t c, const uint8_t* p, size_t n) {
  c = FeedHead(c, p, n);
  c = FeedThreeStreams<kLongBlock>(c, p, n, kShiftLong);
  c = FeedThreeStreams<kMidBlock>(c, p, n, kShiftMid);
  c = FeedThreeStreams<kShortBlock>(c, p, n, kShiftShort);
  return FeedHardwareOneStream(c, p, n);
}

#endif  // CRC32C_HW_X86 || CRC32C_HW_ARM

bool HardwareAvailable() {
#if defined(CRC32C_HW_X86)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#elif defined(CRC32C_HW_ARM)
  return true;  // the build targets CPUs with the CRC extension
#else
  return false;
#endif
}

using FeedFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

FeedFn FeedOf(Crc32cImpl impl) {
  if (!Crc32cAvailable(impl)) {
    std::fprintf(stderr, "crc32c: implementation %s is not available on this CPU or build\n",
                 Crc32cImplName(impl));
    std::abort();
  }
  switch (impl) {
#if defined(CRC32C_HW_X86) || defined(CRC32C_HW_ARM)
    case Crc32cImpl::kHardwareOneStream:
      return FeedHardwareOneStream;
    case Crc32cImpl::kHardware:
      return FeedHardware;
#endif
    default:
      return FeedTable;
  }
}

}  // namespace

const char* Crc32cImplName(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::kTable:
      return "table";
    case Crc32cImpl::kHardwareOneStream:
      return "hardware-1-stream";
    case Crc32cImpl::kHardware:
      return "hardware";
  }
  return "unknown";
}

bool Crc32cAvailable(Crc32cImpl impl) {
  return impl == Crc32cImpl::kTable || HardwareAvailable();
}

Crc32cImpl Crc32cDefaultImpl() {
  return HardwareAvailable() ? Crc32cImpl::kHardware : Crc32cImpl::kTable;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const FeedFn feed = FeedOf(Crc32cDefaultImpl());  // chosen once, thread-safe
  return ~feed(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cExtendWith(Crc32cImpl impl, uint32_t crc, const void* data, size_t n) {
  return ~FeedOf(impl)(~crc, static_cast<const uint8_t*>(data), n);
}

std::string Crc32cHex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

}  // namespace dhp::ckpt
