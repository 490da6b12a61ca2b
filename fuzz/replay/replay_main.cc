// A main for the fuzz targets without libFuzzer, so that the sanitizer tree
// (GCC, make asan) replays the committed corpora with the same targets the
// clang fuzz build fuzzes (docs/fuzzing.md). Each argument that names a file
// is one input, passed once to the target; an argument starting with '-' is
// a libFuzzer flag (fuzz/run.sh passes -runs=1) and is ignored. A crash or a
// failed property aborts, as under libFuzzer; an unreadable file is an error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    std::string path = argv[i];
    if (path.starts_with("-")) continue;
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    std::vector<char> bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "Running: %s\n", path.c_str());
    // An empty input still gets a valid pointer, as libFuzzer gives it.
    static const uint8_t kEmpty = 0;
    LLVMFuzzerTestOneInput(bytes.empty() ? &kEmpty : reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
    ++inputs;
  }
  std::fprintf(stderr, "Executed %d inputs\n", inputs);
  return 0;
}
