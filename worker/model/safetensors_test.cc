#include "worker/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace dhp {
namespace {

std::string TempPath(const std::string& name) {
  std::string dir = testing::TempDir() + "/safetensors_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// Writes a file with the given JSON header and `data_bytes` zero bytes of data.
void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<uint16_t> b = {0x3f80, 0x4000};  // bf16 1.0, 2.0
  const std::string path = TempPath("rt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"w.b", StDtype::kBF16, {2}, b.data(), 4},
                                {"w.a", StDtype::kF32, {2, 3}, a.data(), 24}},
                               {{"format", "pt"}})
                  .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const StTensorInfo& ia = (*f)->tensors().at("w.a");
  EXPECT_EQ(ia.dtype, StDtype::kF32);
  EXPECT_EQ(ia.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp((*f)->data(ia), a.data(), 24), 0);
  const StTensorInfo& ib = (*f)->tensors().at("w.b");
  EXPECT_EQ(ib.dtype, StDtype::kBF16);
  EXPECT_EQ(std::memcmp((*f)->data(ib), b.data(), 4), 0);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  // Sorted by name: w.a's data comes first, and the data section is 8-byte aligned.
  EXPECT_EQ(ia.begin, 0u);
  EXPECT_EQ(ib.begin, 24u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->data(ia)) % 8, 0u);
}

TEST(SafetensorsTest, RefusesBrokenFilesNamingTheProblem) {
  struct Case {
    std::string header;
    size_t data;
    std::string message;
  };
  const std::string p = TempPath("bad.safetensors");
  std::vector<Case> cases = {
      {"not json", 0, p + ": the header is not a JSON object"},
      {R"({"x": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}})", 4,
       p + ": tensor \"x\": unknown dtype \"F99\""},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8,
       p + ": tensor \"x\": data_offsets [0,16] lie outside the 8-byte data section"},
      {R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
       p + ": tensor \"x\": holds 8 bytes but its shape [3] and dtype need 12"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12, p + ": tensor data overlaps"},
      {R"({"x": {"dtype": "F32", "shape": [2]}})", 8,
       p + ": tensor \"x\": needs dtype, shape and data_offsets"},
  };
  for (const Case& c : cases) {
    WriteRaw(p, c.header, c.data);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(p);
    ASSERT_FALSE(f.ok()) << c.header;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(f.status().message(), c.message);
  }
  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_EQ(SafetensorsFile::Open(p).status().message(),
            p + ": too short to be a safetensors file");
  EXPECT_EQ(SafetensorsFile::Open(p + ".none").status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, WriterRefusesSizeMismatchAndDuplicates) {
  float x[2] = {0, 0};
  EXPECT_EQ(
      WriteSafetensors(TempPath("w.safetensors"), {{"a", StDtype::kF32, {3}, x, 8}}).message(),
      "tensor \"a\": 8 bytes do not match its shape");
  EXPECT_EQ(WriteSafetensors(TempPath("w.safetensors"),
                             {{"a", StDtype::kF32, {2}, x, 8}, {"a", StDtype::kF32, {2}, x, 8}})
                .message(),
            "tensor \"a\" is listed twice");
}

TEST(SafetensorsTest, StreamedWriterMatchesTheWriterAndProducesEachTensorOnce) {
  const float a[3] = {1, 2, 3};
  const int64_t b[2] = {7, -8};
  const std::string whole = TempPath("whole.safetensors"),
                    streamed = TempPath("streamed.safetensors");
  ASSERT_TRUE(WriteSafetensors(
                  whole, {{"b", StDtype::kI64, {2, 1}, b, 16}, {"a", StDtype::kF32, {3}, a, 12}},
                  {{"k", "v"}})
                  .ok());
  std::vector<std::string> order;
  std::vector<StTensorSource> sources = {
      {"b",
       StDtype::kI64,
       {2, 1},
       [&](const StTensorSource::WriteFn& write) {
         order.push_back("b");
         write(b, 8);  // in two pieces
         write(b + 1, 8);
         return absl::OkStatus();
       }},
      {"a", StDtype::kF32, {3}, [&](const StTensorSource::WriteFn& write) {
         order.push_back("a");
         write(a, 12);
         return absl::OkStatus();
       }}};
  ASSERT_TRUE(WriteSafetensorsStreamed(streamed, sources, {{"k", "v"}}).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b"}));  // file order: sorted by name
  std::ifstream f1(whole, std::ios::binary), f2(streamed, std::ios::binary);
  const std::string bytes1((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>());
  const std::string bytes2((std::istreambuf_iterator<char>(f2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes1, bytes2);
}

TEST(SafetensorsTest, StreamedWriterErrorsLeaveNoFile) {
  const float a[3] = {1, 2, 3};
  const std::string path = TempPath("failed.safetensors");
  const auto short_write = [&](const StTensorSource::WriteFn& write) {
    write(a, 8);
    return absl::OkStatus();
  };
  absl::Status s = WriteSafetensorsStreamed(path, {{"a", StDtype::kF32, {3}, short_write}});
  EXPECT_EQ(s.message(),
            "writing " + path + ": tensor \"a\": 8 bytes produced, its shape needs 12");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto failing = [](const StTensorSource::WriteFn&) {
    return absl::DataLossError("shard 1 is corrupt");
  };
  s = WriteSafetensorsStreamed(path, {{"a", StDtype::kF32, {3}, failing}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "writing " + path + ": shard 1 is corrupt");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsTest, ShardedCheckpointDirectoryLoadsByName) {
  const std::string dir = TempPath("sharded");
  std::filesystem::create_directories(dir);
  float one[1] = {1}, two[2] = {2, 3};
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                               {{"a", StDtype::kF32, {1}, one, 4}})
                  .ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {{"b", StDtype::kF32, {2}, two, 8}})
                  .ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata": {"total_size": 12}, "weight_map": {
             "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"a", "b"}));
  const SafetensorsFile* fb = (*ckpt)->FileOf("b");
  ASSERT_NE(fb, nullptr);
  EXPECT_EQ(fb->path(), dir + "/model-00002-of-00002.safetensors");
  EXPECT_EQ((*ckpt)->FileOf("c"), nullptr);

  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})";
  EXPECT_EQ(
      CheckpointDir::Open(dir).status().message(),
      dir + "/model.safetensors.index.json: \"a\" is not in model-00002-of-00002.safetensors");
}

}  // namespace
}  // namespace dhp
