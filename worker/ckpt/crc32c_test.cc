#include "worker/ckpt/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace dhp::ckpt {
namespace {

constexpr Crc32cImpl kHardwareImpls[] = {Crc32cImpl::kHardwareOneStream, Crc32cImpl::kHardware};
constexpr char kNoHardware[] =
    "this CPU (or build) has no CRC32C instruction (x86-64 SSE4.2 / ARMv8 CRC): only the table "
    "implementation is tested";

// Skips the calling test where the hardware implementations cannot run.
#define SKIP_WITHOUT_HARDWARE() \
  if (!Crc32cAvailable(Crc32cImpl::kHardware)) GTEST_SKIP() << kNoHardware

// Bit-at-a-time reference (the definition), to check the table-driven version against.
uint32_t ReferenceCrc32c(const uint8_t* data, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

uint32_t ReferenceCrc32c(const std::vector<uint8_t>& data) {
  return ReferenceCrc32c(data.data(), data.size());
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

uint32_t Table(uint32_t crc, const uint8_t* data, size_t n) {
  return Crc32cExtendWith(Crc32cImpl::kTable, crc, data, n);
}

TEST(Crc32cTest, StandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xe3069283u);
  EXPECT_EQ(Crc32cHex(Crc32c(s.data(), s.size())), "e3069283");
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32cExtendWith(Crc32cImpl::kTable, 0, s.data(), s.size()), 0xe3069283u);
  EXPECT_EQ(Crc32cExtendWith(Crc32cImpl::kTable, 0, nullptr, 0), 0u);
}

// RFC 3720 (iSCSI) appendix B.4 vectors.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i), dec[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62a8ab43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46dd794eu);
  EXPECT_EQ(Crc32c(dec.data(), 32), 0x113fdb5cu);
}

TEST(Crc32cTest, MatchesBitwiseReferenceAndExtendsAcrossAnySplit) {
  std::mt19937 rng(3);
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 1000u}) {
    std::vector<uint8_t> data(n);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const uint32_t whole = Crc32c(data.data(), n);
    EXPECT_EQ(whole, ReferenceCrc32c(data)) << n;
    EXPECT_EQ(Table(0, data.data(), n), whole) << n;
    for (size_t cut = 0; cut <= n; cut += (n > 64 ? 37 : 1)) {
      const uint32_t a = Crc32c(data.data(), cut);
      EXPECT_EQ(Crc32cExtend(a, data.data() + cut, n - cut), whole) << n << " cut " << cut;
    }
  }
}

TEST(Crc32cTest, HexIsEightLowerCaseDigits) {
  EXPECT_EQ(Crc32cHex(0), "00000000");
  EXPECT_EQ(Crc32cHex(0xABCDEF01u), "abcdef01");
}

TEST(Crc32cTest, NamesAndDefault) {
  EXPECT_STREQ(Crc32cImplName(Crc32cImpl::kTable), "table");
  EXPECT_STREQ(Crc32cImplName(Crc32cImpl::kHardwareOneStream), "hardware-1-stream");
  EXPECT_STREQ(Crc32cImplName(Crc32cImpl::kHardware), "hardware");
  EXPECT_TRUE(Crc32cAvailable(Crc32cImpl::kTable));
  EXPECT_EQ(Crc32cAvailable(Crc32cImpl::kHardwareOneStream),
            Crc32cAvailable(Crc32cImpl::kHardware));
  EXPECT_EQ(Crc32cDefaultImpl(), Crc32cAvailable(Crc32cImpl::kHardware)
                                     ? Crc32cImpl::kHardware
                                     : Crc32cImpl::kTable);
#if defined(__x86_64__)
  // On x86-64 the hardware path exists in every build; only the CPU decides.
  EXPECT_EQ(Crc32cAvailable(Crc32cImpl::kHardware), __builtin_cpu_supports("sse4.2") != 0);
#endif
}

// ---- the hardware implementations against the table ------------------------------------------

TEST(Crc32cHardwareTest, IsTheDefaultAndMatchesCheckValueAndVectors) {
  SKIP_WITHOUT_HARDWARE();
  EXPECT_EQ(Crc32cDefaultImpl(), Crc32cImpl::kHardware);
  const std::string s = "123456789";
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  for (Crc32cImpl impl : kHardwareImpls) {
    SCOPED_TRACE(Crc32cImplName(impl));
    EXPECT_EQ(Crc32cExtendWith(impl, 0, s.data(), s.size()), 0xe3069283u);
    EXPECT_EQ(Crc32cExtendWith(impl, 0, nullptr, 0), 0u);
    EXPECT_EQ(Crc32cExtendWith(impl, 0xe3069283u, nullptr, 0), 0xe3069283u);
    EXPECT_EQ(Crc32cExtendWith(impl, 0, s.data(), 0), 0u);
    EXPECT_EQ(Crc32cExtendWith(impl, 0, zeros.data(), 32), 0x8a9136aau);
    EXPECT_EQ(Crc32cExtendWith(impl, 0, ones.data(), 32), 0x62a8ab43u);
  }
}

// Every length 0..300 at every offset 0..15 from a 64-byte boundary (so every alignment the
// byte-wise head of the hardware loop can meet), starting from 0 and from another CRC.
TEST(Crc32cHardwareTest, MatchesTableAtEveryLengthAndAlignment) {
  SKIP_WITHOUT_HARDWARE();
  const std::vector<uint8_t> random = RandomBytes(320, 11);
  alignas(64) uint8_t buf[320];
  std::copy(random.begin(), random.end(), buf);
  for (Crc32cImpl impl : kHardwareImpls) {
    for (size_t offset = 0; offset < 16; ++offset) {
      for (size_t n = 0; n <= 300; ++n) {
        const uint8_t* p = buf + offset;
        ASSERT_EQ(Crc32cExtendWith(impl, 0, p, n), Table(0, p, n))
            << Crc32cImplName(impl) << " offset " << offset << " length " << n;
        ASSERT_EQ(Crc32cExtendWith(impl, 0x12345678u, p, n), Table(0x12345678u, p, n))
            << Crc32cImplName(impl) << " offset " << offset << " length " << n;
      }
    }
  }
}

// Lengths around the points where the three-stream loop changes gear (crc32c.cc: rounds of
// 3 x 65,536, 3 x 4,096 and 3 x 256 bytes, then one stream), and mixes of them, at all eight
// alignments.
TEST(Crc32cHardwareTest, MatchesTableAroundInterleaveBlockSizes) {
  SKIP_WITHOUT_HARDWARE();
  const size_t kShort = 3 * 256, kMid = 3 * 4096, kLong = 3 * 65536;
  std::vector<size_t> lengths;
  for (size_t base : {kShort, 2 * kShort, kMid, kMid + kShort, 2 * kMid + 3 * kShort, kLong,
                      kLong + kMid + kShort, 2 * kLong, 2 * kLong - kShort, 2 * kLong + kMid}) {
    for (size_t n = base - 9; n <= base + 9; ++n) lengths.push_back(n);
  }
  const std::vector<uint8_t> data = RandomBytes(2 * kLong + kMid + 32, 5);
  for (size_t n : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const uint8_t* p = data.data() + offset;
      const uint32_t expected = Table(0, p, n);
      for (Crc32cImpl impl : kHardwareImpls) {
        ASSERT_EQ(Crc32cExtendWith(impl, 0, p, n), expected)
            << Crc32cImplName(impl) << " offset " << offset << " length " << n;
      }
    }
  }
  // And one against the bitwise definition, not just against the table.
  EXPECT_EQ(Crc32cExtendWith(Crc32cImpl::kHardware, 0, data.data(), kLong + kMid + kShort + 3),
            ReferenceCrc32c(data.data(), kLong + kMid + kShort + 3));
}

// A message fed in odd-sized chunks, each extending the previous CRC, gives the same CRC after
// every chunk as the table fed the same way, and the whole message's CRC at the end; the
// implementations can also take turns on one message.
TEST(Crc32cHardwareTest, ExtendsIncrementallyAcrossOddChunks) {
  SKIP_WITHOUT_HARDWARE();
  const std::vector<uint8_t> data = RandomBytes(1500000, 7);
  const uint32_t whole = Table(0, data.data(), data.size());
  const size_t chunks[] = {1, 3, 7, 13, 255, 257, 769, 12289, 196609, 5, 4095, 393217, 31, 1021,
                           99991, 24577};
  for (Crc32cImpl impl : kHardwareImpls) {
    uint32_t hw = 0, table = 0, mixed = 0;
    size_t pos = 0;
    for (size_t i = 0; pos < data.size(); ++i) {
      const size_t n = std::min(chunks[i % std::size(chunks)], data.size() - pos);
      const uint8_t* p = data.data() + pos;
      hw = Crc32cExtendWith(impl, hw, p, n);
      table = Table(table, p, n);
      mixed = i % 2 ? Table(mixed, p, n) : Crc32cExtendWith(impl, mixed, p, n);
      ASSERT_EQ(hw, table) << Crc32cImplName(impl) << " after " << pos + n << " bytes";
      ASSERT_EQ(mixed, table) << Crc32cImplName(impl) << " after " << pos + n << " bytes";
      pos += n;
    }
    EXPECT_EQ(hw, whole) << Crc32cImplName(impl);
  }
}

// A few MB, at an odd offset, through every implementation and the default entry point.
TEST(Crc32cHardwareTest, MatchesTableOnAFewMegabytes) {
  SKIP_WITHOUT_HARDWARE();
  const size_t n = (5u << 20) + 123;
  const std::vector<uint8_t> data = RandomBytes(n + 3, 13);
  const uint8_t* p = data.data() + 3;
  const uint32_t expected = Table(0, p, n);
  for (Crc32cImpl impl : kHardwareImpls) {
    EXPECT_EQ(Crc32cExtendWith(impl, 0, p, n), expected) << Crc32cImplName(impl);
  }
  EXPECT_EQ(Crc32c(p, n), expected);
  const std::vector<uint8_t> zeros(3u << 20, 0);
  EXPECT_EQ(Crc32cExtendWith(Crc32cImpl::kHardware, 0, zeros.data(), zeros.size()),
            Table(0, zeros.data(), zeros.size()));
}

}  // namespace
}  // namespace dhp::ckpt
