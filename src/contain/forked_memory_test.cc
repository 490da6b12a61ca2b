#include "contain/forked_memory.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace cordon::contain {
namespace {

// A fork that runs no pthread_atfork handler (as Launch's clone3 does not).
pid_t RawFork() { return static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0)); }

int ExitCodeOf(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// msync fails with ENOMEM where nothing is mapped.
bool Mapped(const void* addr, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  return ::msync(reinterpret_cast<void*>(start), bytes, MS_ASYNC) == 0;
}

// The rest of the smaps line `name:` of this process's mapping that holds
// `addr` ("" if there is none).
std::string SmapsField(const void* addr, const std::string& name) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find('-'), space = line.find(' ');
    if (dash != std::string::npos && dash < space && std::isxdigit(line[0])) {
      uintptr_t start = std::stoull(line.substr(0, dash), nullptr, 16);
      uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = start <= a && a < end;
    } else if (inside && line.starts_with(name + ":")) {
      return line.substr(name.size() + 1);
    }
  }
  return "";
}

// The smaps field `name` (kB) of that mapping; -1 if there is none.
long SmapsKb(const void* addr, const std::string& name) {
  std::string kb = SmapsField(addr, name);
  return kb.empty() ? -1 : std::stol(kb);
}

// Four MiB in a mapping of the heap's (malloc maps a block this large
// apart), every page written.
std::vector<char> HeapBlock() { return std::vector<char>(4 << 20, 'x'); }

bool Within(const ChildMemory& memory, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& [start, end] : memory.ranges()) {
    if (start <= a && a < end) return true;
  }
  return false;
}

TEST(ChildMemoryTest, CopiesArraysAndStringsIntoItsOwnMappings) {
  ChildMemory memory;
  const int fds[] = {3, 4, 5};
  const int* copied = memory.Copy(fds, 3);
  ASSERT_NE(copied, nullptr);
  EXPECT_EQ(std::vector<int>(copied, copied + 3), std::vector<int>({3, 4, 5}));
  std::string arg0 = "/bin/echo", arg1 = "hello";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  char* const* list = memory.CopyStrings(argv);
  ASSERT_NE(list, nullptr);
  EXPECT_STREQ(list[0], "/bin/echo");
  EXPECT_STREQ(list[1], "hello");
  EXPECT_EQ(list[2], nullptr);
  EXPECT_NE(list[0], arg0.data());
  // Larger than a chunk: a mapping of its own.
  std::string big(200 * 1024, 'b');
  const char* big_copy = memory.CopyString(big.c_str());
  EXPECT_EQ(std::string(big_copy), big);
  for (const void* p : {static_cast<const void*>(copied), static_cast<const void*>(list),
                        static_cast<const void*>(list[1]), static_cast<const void*>(big_copy)}) {
    EXPECT_TRUE(Within(memory, p));
  }
  EXPECT_GE(memory.ranges().size(), 2u);
  EXPECT_EQ(memory.CopyString(nullptr), nullptr);
  EXPECT_EQ(memory.Copy(static_cast<const int*>(nullptr), 0), nullptr);
  EXPECT_TRUE(memory.ok());
}

// Under AddressSanitizer (kHeapLeftOutOfForks false) the heap is forked
// whole, its shadow with it: the tests check that instead.
TEST(HeapNotForkedTest, AChildGetsItsStackTlsAndChildMemoryButNotTheHeap) {
  std::vector<char> heap = HeapBlock();
  ChildMemory memory;
  const char* kept = memory.CopyString("kept");
  const int on_stack = 42;
  pid_t pid;
  {
    HeapNotForked lean(memory);
    pid = RawFork();
    if (pid == 0) {
      // No allocation here: the heap is not in this process.
      if (Mapped(heap.data(), heap.size()) == kHeapLeftOutOfForks) ::_exit(1);
      if (kHeapLeftOutOfForks && errno != ENOMEM) ::_exit(2);  // errno is TLS: it is there
      if (kept[0] != 'k' || kept[2] != 'p' || kept[4] != '\0') ::_exit(3);
      if (on_stack != 42) ::_exit(4);
      ::_exit(0);
    }
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ExitCodeOf(pid), 0) << "1: the heap was forked; 2: errno; 3: ChildMemory; 4: stack";

  // Afterwards a fork is whole again.
  pid = RawFork();
  if (pid == 0) ::_exit(Mapped(heap.data(), heap.size()) && heap[4096] == 'x' ? 0 : 1);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ExitCodeOf(pid), 0);
}

TEST(HeapNotForkedTest, TheParentsHeapStaysItsOwnWhileTheChildLives) {
  std::vector<char> heap = HeapBlock();
  // A child that waits for EOF on a pipe, forked with or without the scope.
  auto waiting_child = [&](bool lean, int* release) {
    int p[2];
    if (::pipe(p) != 0) return -1;
    pid_t pid;
    {
      std::optional<HeapNotForked> scope;
      if (lean) scope.emplace(ChildMemory());
      pid = RawFork();
      if (pid == 0) {
        char c;
        ::close(p[1]);
        (void)!::read(p[0], &c, 1);
        ::_exit(0);
      }
    }
    ::close(p[0]);
    *release = p[1];
    return static_cast<int>(pid);
  };
  // The measure sees sharing: a plain fork shares every page until written.
  int release = -1;
  pid_t plain = waiting_child(false, &release);
  ASSERT_GT(plain, 0);
  EXPECT_GE(SmapsKb(heap.data(), "Shared_Dirty"), 4096);
  ::close(release);
  EXPECT_EQ(ExitCodeOf(plain), 0);

  pid_t lean = waiting_child(true, &release);
  ASSERT_GT(lean, 0);
  if (kHeapLeftOutOfForks) {
    EXPECT_EQ(SmapsKb(heap.data(), "Shared_Dirty"), 0);
    EXPECT_GE(SmapsKb(heap.data(), "Private_Dirty"), 4096);
  } else {
    EXPECT_GE(SmapsKb(heap.data(), "Shared_Dirty"), 4096);
  }
  ::close(release);
  EXPECT_EQ(ExitCodeOf(lean), 0);
}

TEST(HeapNotForkedTest, AForkOnAnotherThreadWaitsForTheScopeToEnd) {
  std::vector<char> heap = HeapBlock();
  std::atomic<bool> ended{false};
  std::atomic<bool> forked_after_end{false};
  int child_code = -1;
  std::thread other;
  {
    HeapNotForked lean((ChildMemory()));
    other = std::thread([&] {
      pid_t pid = ::fork();  // its atfork handler waits for the scope
      if (pid == 0) ::_exit(Mapped(heap.data(), heap.size()) ? 0 : 1);
      forked_after_end = ended.load();
      child_code = pid > 0 ? ExitCodeOf(pid) : -1;
    });
    // Long enough for an unheld fork to have happened many times over.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ended = true;
  }
  other.join();
  EXPECT_TRUE(forked_after_end);
  EXPECT_EQ(child_code, 0) << "the other thread's child missed the heap";
}

// Whether the mapping that holds `addr` is left out of forks (VmFlags "dc").
bool LeftOutOfForks(const void* addr) {
  return (SmapsField(addr, "VmFlags") + " ").find(" dc ") != std::string::npos;
}

// The daemon launches from several threads while others map and unmap: a
// mapping the list named may have a hole in it by the time it is marked
// (the madvise then fails, having marked what is there). What was marked
// is given back all the same; otherwise it stayed out of every later fork,
// and a later launch's child could lack its own plan there.
// (Under AddressSanitizer nothing is marked, and nothing must stay marked.)
TEST(HeapNotForkedTest, WhatItMarksIsGivenBackEvenWhereAnotherThreadUnmapsMeanwhile) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Three pages; another thread takes the middle one away and puts it back.
  char* region = static_cast<char*>(
      ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  char* middle = region + page;
  std::atomic<bool> stop{false};
  std::atomic<bool> middle_ours{true};
  std::thread churn([&] {
    // Only a page it mapped itself: once the hole is another mapping's
    // (this process's allocator may take it), it is left alone.
    while (!stop && middle_ours) {
      ::munmap(middle, page);
      middle_ours = ::mmap(middle, page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == middle;
    }
  });
  for (int i = 0; i < 2000 && !LeftOutOfForks(region); ++i) {
    HeapNotForked lean((ChildMemory()));
  }
  stop = true;
  churn.join();
  EXPECT_FALSE(LeftOutOfForks(region)) << "a page stayed out of forks after its scope ended";
  EXPECT_FALSE(LeftOutOfForks(region + 2 * page));
  ::munmap(region, page);
  ::munmap(region + 2 * page, page);
  if (middle_ours) ::munmap(middle, page);
}

}  // namespace
}  // namespace cordon::contain
