// Builds a process tree: `spawn_tree N [ignore-term] [exit]` starts N
// sleeping descendants; every other one calls setsid() and double-forks,
// escaping the process group. Prints "ready" and the descendants' pids once
// all are running, then sleeps, or with "exit" exits 0 leaving them behind.
// With "ignore-term" everyone ignores SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 10;
  bool ignore_term = false, exit_after = false;
  for (int i = 2; i < argc; ++i) {
    ignore_term |= std::strcmp(argv[i], "ignore-term") == 0;
    exit_after |= std::strcmp(argv[i], "exit") == 0;
  }
  if (ignore_term) signal(SIGTERM, SIG_IGN);
  int ready[2];
  if (pipe(ready) != 0) return 2;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid > 0) continue;
    close(ready[0]);
    if (i % 2 == 1) {
      // The escapee: a new session, then orphaned by its parent.
      setsid();
      if (fork() != 0) _exit(0);
    }
    pid_t self = getpid();
    if (write(ready[1], &self, sizeof self) != sizeof self) _exit(1);
    close(ready[1]);
    for (;;) pause();
  }
  close(ready[1]);
  std::printf("ready");
  pid_t pid;
  for (int i = 0; i < n && read(ready[0], &pid, sizeof pid) == sizeof pid; ++i) {
    std::printf(" %d", pid);
  }
  std::printf("\n");
  std::fflush(stdout);
  if (exit_after) return 0;
  for (;;) pause();
}
