// A main() for the fuzz targets outside libFuzzer: runs LLVMFuzzerTestOneInput once on each file
// named on the command line (a directory: each file in it, sorted); with no arguments, on its
// corpus fuzz/corpus/<name without _fuzzer>/ from the working directory (the source root under
// CTest, the runfiles root under Bazel). The Bazel and CMake builds
// link it into <target>_regression tests over the seed corpus and every crash found so far
// (fuzz/corpus/<target>/); tools/fuzz.sh links the same targets with libFuzzer instead.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz_main: %s does not exist\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  DIR* dir = opendir(path.c_str());
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) Collect(path + "/" + name, files);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  if (argc == 1) {
    std::string name = argv[0];
    name = name.substr(name.rfind('/') + 1);
    const size_t suffix = name.rfind("_fuzzer");
    Collect("fuzz/corpus/" + name.substr(0, suffix), &files);
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_main: no inputs\n");
    return 2;
  }
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const std::string data = bytes.str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::printf("fuzz_main: %zu inputs ran\n", files.size());
  return 0;
}
