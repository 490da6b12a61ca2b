// What a launch's child gets of its supervisor's memory.
//
// A namespaced sandbox's init is a fork of its supervisor, and it lives as
// long as the sandbox: parked in the daemon's pool, then as pid 1 of the
// command. Were it a plain fork, every page the supervisor wrote after it
// would be copied first (copy-on-write), and each copy would flush the
// page from the TLB of every core the supervisor's threads ran on: an
// inter-processor interrupt each, dear in a VM. Measured on a 2-core VM
// under 4 clients' runs: ~300 such faults per run, half of the daemon
// loop's time (docs/benchmarks.md). So a child gets none of the heap: what
// it reads is copied into a ChildMemory first, and HeapNotForked keeps the
// rest out of the fork. (The init then holds no copy of the daemon's
// heap either, nor what that holds of other sandboxes.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace cordon::contain {

// Whether HeapNotForked leaves anything out: not under AddressSanitizer,
// whose shadow every access reads.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kHeapLeftOutOfForks = false;
#else
inline constexpr bool kHeapLeftOutOfForks = true;
#endif

// Memory for what a child reads: mappings of its own (so that HeapNotForked
// leaves them in the fork), filled in order and unmapped with the object.
// Parent side.
class ChildMemory final {
 public:
  ChildMemory() = default;
  ~ChildMemory();
  ChildMemory(const ChildMemory&) = delete;
  ChildMemory& operator=(const ChildMemory&) = delete;

  // `count` items copied here (plain data only); null for none.
  template <typename T>
  T* Copy(const T* items, size_t count) {
    if (items == nullptr) return nullptr;
    void* at = Allocate(sizeof(T) * count, alignof(T));
    if (at != nullptr) std::memcpy(at, items, sizeof(T) * count);
    return static_cast<T*>(at);
  }
  // A NUL-terminated string, or a null-terminated array of them.
  const char* CopyString(const char* s);
  template <typename Char>
  Char* const* CopyStrings(Char* const* list) {
    if (list == nullptr) return nullptr;
    size_t n = 0;
    while (list[n] != nullptr) ++n;
    auto* out = static_cast<Char**>(Allocate(sizeof(Char*) * (n + 1), alignof(Char*)));
    if (out == nullptr) return nullptr;
    for (size_t i = 0; i < n; ++i) out[i] = const_cast<Char*>(CopyString(list[i]));
    out[n] = nullptr;
    return out;
  }

  // False once a mapping could not be made (the copies are then incomplete).
  bool ok() const { return ok_; }
  // [start, end) of each mapping.
  const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges() const { return chunks_; }

 private:
  void* Allocate(size_t bytes, size_t align);  // null when no mapping could be made

  std::vector<std::pair<uintptr_t, uintptr_t>> chunks_;
  uintptr_t next_ = 0;  // in the last chunk
  bool ok_ = true;
};

// Parent side. While it lives, the process's private anonymous writable
// mappings (the heap, other threads' stacks and arenas) are left out of a
// child made with clone3 (MADV_DONTFORK), except: the one holding this
// thread's stack, the pages near its thread pointer (its TLS, wherever the
// C library put it), the binaries' zero-filled data (an anonymous mapping
// that begins where a file's ends), and `keep`'s mappings. A fork() on
// another thread meanwhile waits (pthread_atfork), since its child would
// miss them. Without kHeapLeftOutOfForks, or in a program whose library
// calls are bound lazily (not linked with -z now: the dynamic linker's
// tables are anonymous memory too), it leaves everything in. Marking
// costs a read of /proc/self/maps and a madvise per mapping, ~0.1 ms;
// failing to mark costs only the saving.
class HeapNotForked final {
 public:
  explicit HeapNotForked(const ChildMemory& keep);
  ~HeapNotForked();
  HeapNotForked(const HeapNotForked&) = delete;
  HeapNotForked& operator=(const HeapNotForked&) = delete;

 private:
  std::unique_lock<std::mutex> forks_held_;
  std::vector<std::pair<uintptr_t, uintptr_t>> marked_;
};

}  // namespace cordon::contain
