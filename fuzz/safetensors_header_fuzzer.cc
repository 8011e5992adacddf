// The safetensors reader (worker/model/safetensors: 8-byte length, JSON header, offsets) on an
// arbitrary file. It may refuse it; it may not crash, and every tensor it lists must lie inside
// the file with as many bytes as its dtype and shape need.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("safetensors", 0);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = dhp::SafetensorsFile::Open(path);
  if (file.ok()) {
    for (const auto& [name, info] : (*file)->tensors()) {
      size_t elements = 1;
      for (int64_t d : info.shape) elements *= static_cast<size_t>(d);
      const bool inside = info.begin <= info.end && info.end <= size;
      if (!inside || info.end - info.begin != elements * dhp::StDtypeSize(info.dtype)) {
        std::fprintf(stderr, "safetensors_header_fuzzer: tensor %s: bytes [%zu, %zu)\n",
                     name.c_str(), info.begin, info.end);
        std::abort();
      }
    }
  }
  close(fd);
  return 0;
}
