// Forks children that sleep until fork fails (or a cap is reached), then
// prints how many forks succeeded and the errno name of the failure. Used to
// show that a process limit holds.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  long cap = argc > 1 ? std::atol(argv[1]) : 10000;
  long forked = 0;
  int err = 0;
  while (forked < cap) {
    pid_t pid = fork();
    if (pid < 0) {
      err = errno;
      break;
    }
    if (pid == 0) {
      pause();
      _exit(0);
    }
    ++forked;
  }
  std::printf("forked %ld %s\n", forked, err ? strerrorname_np(err) : "none");
  std::fflush(stdout);
  return 0;
}
