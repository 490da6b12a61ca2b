// The floor of a supervised run: a static program that forks, execs its
// arguments and waits, recording nothing, making no cgroup and building
// no sandbox. bench/run.sh times it beside `cordon run --isolation none`,
// so the ratio to a bare run shows what any supervisor pays before
// cordon's own work. Usage: spawn_floor PROG [ARGS...]; exits as PROG did.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("usage: spawn_floor PROG [ARGS...]\n", stderr);
    return 2;
  }
  pid_t child = ::fork();
  if (child < 0) return 125;
  if (child == 0) {
    ::execv(argv[1], argv + 1);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
