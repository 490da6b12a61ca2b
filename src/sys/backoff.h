// How long to wait before trying again what has just failed: 1 s, doubling
// to a minute, back to nothing after a success. A warm pool uses it so that
// a host where its sandboxes cannot start is not asked at every chance.
#pragma once

#include <algorithm>
#include <chrono>

namespace cordon::sys {

struct Backoff {
  std::chrono::steady_clock::time_point not_before;
  std::chrono::milliseconds delay{0};

  bool waiting() const { return std::chrono::steady_clock::now() < not_before; }
  // After a failure: the new delay, from now.
  std::chrono::milliseconds Failed() {
    using std::chrono::milliseconds;
    delay = std::min<milliseconds>(std::max<milliseconds>(delay * 2, std::chrono::seconds(1)),
                                   std::chrono::minutes(1));
    not_before = std::chrono::steady_clock::now() + delay;
    return delay;
  }
  void Succeeded() { *this = Backoff{}; }
};

}  // namespace cordon::sys
