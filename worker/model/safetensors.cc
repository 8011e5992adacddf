#include "worker/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dhp {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;

struct DtypeEntry {
  const char* name;
  StDtype dtype;
  size_t size;
};
constexpr DtypeEntry kDtypes[] = {
    {"F32", StDtype::kF32, 4}, {"F16", StDtype::kF16, 2}, {"BF16", StDtype::kBF16, 2},
    {"F64", StDtype::kF64, 8}, {"I64", StDtype::kI64, 8}, {"I32", StDtype::kI32, 4},
    {"I8", StDtype::kI8, 1},   {"U8", StDtype::kU8, 1},   {"BOOL", StDtype::kBool, 1},
};

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(path + ": " + what);
}

absl::Status ParseEntry(const std::string& path, const std::string& name, const nlohmann::json& e,
                        size_t data_size, StTensorInfo* info) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets")) {
    return Bad(path, where + "needs dtype, shape and data_offsets");
  }
  if (!e["dtype"].is_string() || !ParseStDtype(e["dtype"].get<std::string>(), &info->dtype)) {
    return Bad(path, where + "unknown dtype " + e["dtype"].dump());
  }
  uint64_t count = 1;
  if (!e["shape"].is_array()) return Bad(path, where + "shape is not a list");
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned()) return Bad(path, where + "shape " + e["shape"].dump());
    info->shape.push_back(d.get<int64_t>());
    count *= d.get<uint64_t>();
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return Bad(path, where + "data_offsets must be [begin, end]");
  }
  info->begin = off[0].get<size_t>();
  info->end = off[1].get<size_t>();
  if (info->begin > info->end || info->end > data_size) {
    return Bad(path, where + "data_offsets " + off.dump() + " lie outside the " +
                         std::to_string(data_size) + "-byte data section");
  }
  if (info->end - info->begin != count * StDtypeSize(info->dtype)) {
    return Bad(path, where + "holds " + std::to_string(info->end - info->begin) +
                         " bytes but its shape " + e["shape"].dump() + " and dtype need " +
                         std::to_string(count * StDtypeSize(info->dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

bool ParseStDtype(const std::string& name, StDtype* out) {
  for (const DtypeEntry& d : kDtypes) {
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

const char* StDtypeName(StDtype dtype) {
  for (const DtypeEntry& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

size_t StDtypeSize(StDtype dtype) {
  for (const DtypeEntry& d : kDtypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 8) {
    ::close(fd);
    return Bad(path, "too short to be a safetensors file");
  }
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Bad(path, std::string("cannot map: ") + std::strerror(errno));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = static_cast<size_t>(st.st_size);

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || 8 + header_len > f->map_size_) {
    return Bad(path, "header length " + std::to_string(header_len) + " exceeds the file size " +
                         std::to_string(f->map_size_));
  }
  f->data_ = bytes + 8 + header_len;
  const size_t data_size = f->map_size_ - 8 - header_len;
  nlohmann::json header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (!header.is_object()) return Bad(path, "the header is not a JSON object");
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Bad(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) return Bad(path, "__metadata__ values must be strings");
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    StTensorInfo info;
    if (absl::Status s = ParseEntry(path, it.key(), it.value(), data_size, &info); !s.ok()) {
      return s;
    }
    ranges.push_back({info.begin, info.end});
    f->tensors_.emplace(it.key(), std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return Bad(path, "tensor data overlaps");
  }
  return f;
}

void SafetensorsFile::Release(size_t begin, size_t end) const {
  if (begin >= end) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uint8_t* base = static_cast<uint8_t*>(map_);
  const size_t offset = static_cast<size_t>(data_ - base);  // the header's bytes
  const size_t from = (offset + begin) / page * page;
  const size_t to = std::min(map_size_, (offset + end + page - 1) / page * page);
  madvise(base + from, to - from, MADV_DONTNEED);  // advice: a failure costs only memory
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<StTensorData>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<StTensorSource> sources;
  sources.reserve(tensors.size());
  for (const StTensorData& t : tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    if (count * StDtypeSize(t.dtype) != t.nbytes) {
      return absl::InvalidArgumentError("tensor \"" + t.name + "\": " + std::to_string(t.nbytes) +
                                        " bytes do not match its shape");
    }
    sources.push_back({t.name, t.dtype, t.shape, [&t](const StTensorSource::WriteFn& write) {
                         write(t.data, t.nbytes);
                         return absl::OkStatus();
                       }});
  }
  return WriteSafetensorsStreamed(path, sources, metadata);
}

absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      const std::vector<StTensorSource>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  std::vector<const StTensorSource*> sorted;
  for (const StTensorSource& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const StTensorSource* a, const StTensorSource* b) { return a->name < b->name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<size_t> sizes;
  size_t offset = 0;
  for (const StTensorSource* t : sorted) {
    uint64_t count = 1;
    for (int64_t d : t->shape) {
      if (d < 0) return absl::InvalidArgumentError("tensor \"" + t->name + "\": negative shape");
      count *= static_cast<uint64_t>(d);
    }
    const size_t nbytes = count * StDtypeSize(t->dtype);
    if (header.contains(t->name)) {
      return absl::InvalidArgumentError("tensor \"" + t->name + "\" is listed twice");
    }
    header[t->name] = {{"dtype", StDtypeName(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  const std::string tmp = path + ".tmp";
  absl::Status status;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError("cannot write " + tmp);
    uint64_t n = text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (size_t k = 0; k < sorted.size() && status.ok() && out; ++k) {
      size_t written = 0;
      status = sorted[k]->produce([&](const void* data, size_t nbytes) {
        written += nbytes;
        if (written <= sizes[k]) {
          out.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
        }
      });
      if (status.ok() && written != sizes[k]) {
        status = absl::InvalidArgumentError("tensor \"" + sorted[k]->name +
                                            "\": " + std::to_string(written) +
                                            " bytes produced, its shape "
                                            "needs " +
                                            std::to_string(sizes[k]));
      }
      if (!status.ok()) {
        status =
            absl::Status(status.code(), "writing " + path + ": " + std::string(status.message()));
      }
    }
    out.flush();
    if (status.ok() && !out) {
      status = absl::ResourceExhaustedError("writing " + tmp + " failed (disk full?)");
    }
  }
  if (!status.ok()) {
    std::remove(tmp.c_str());
    return status;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError("cannot rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointDir>> CheckpointDir::Open(const std::string& dir) {
  auto ckpt = std::make_unique<CheckpointDir>();
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
  std::ifstream index(index_path);
  if (index) {
    std::stringstream buf;
    buf << index.rdbuf();
    nlohmann::json j = nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(index_path + ": needs a \"weight_map\" object");
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(index_path + ": weight_map[\"" + it.key() +
                                          "\"] is not a file name");
      }
      weight_map[it.key()] = it.value().get<std::string>();
      if (std::find(files.begin(), files.end(), weight_map[it.key()]) == files.end()) {
        files.push_back(weight_map[it.key()]);
      }
    }
  } else {
    files.push_back("model.safetensors");
  }
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const std::string& name : files) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir + "/" + name);
    if (!f.ok()) return f.status();
    by_file[name] = f->get();
    ckpt->files_.push_back(std::move(*f));
  }
  for (const auto& f : ckpt->files_) {
    for (const auto& [tensor, info] : f->tensors()) ckpt->index_[tensor] = f.get();
  }
  for (const auto& [tensor, file] : weight_map) {
    auto it = ckpt->index_.find(tensor);
    if (it == ckpt->index_.end() || it->second != by_file[file]) {
      return absl::InvalidArgumentError(index_path + ": \"" + tensor + "\" is not in " + file);
    }
  }
  return ckpt;
}

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : index_) out.push_back(name);
  return out;
}

const SafetensorsFile* CheckpointDir::FileOf(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

}  // namespace dhp
