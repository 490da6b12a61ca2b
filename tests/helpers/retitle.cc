// Overwrites its own title (argv[0] as /proc/PID/cmdline shows it) with
// argv[1] after start, as some programs do, prints "ready" and sleeps.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string title = argv[1];
  // argv strings are contiguous: rewrite the whole area.
  char* start = argv[0];
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]);
  size_t room = static_cast<size_t>(end - start);
  std::memset(start, 0, room);
  std::memcpy(start, title.data(), std::min(title.size(), room));
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
