// Allocates and touches N MiB (argv[1]) one MiB at a time, printing progress,
// then sleeps. Used to hit a memory limit.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  long mib = argc > 1 ? std::atol(argv[1]) : 1024;
  for (long i = 0; i < mib; ++i) {
    char* block = static_cast<char*>(std::malloc(1 << 20));
    if (block == nullptr) {
      std::printf("malloc failed after %ld MiB\n", i);
      return 3;
    }
    std::memset(block, 1, 1 << 20);
  }
  std::printf("allocated %ld MiB\n", mib);
  return 0;
}
