// The floor for a kernel round trip: a direct ZeroMQ client (the same one the
// daemon uses) to Debian's ipykernel over ipc sockets, executing `1+1` and
// waiting for its reply and idle. Prints {"create_ms", "first_result_ms",
// "round_trip_ms"} (medians over --runs executions).
//     zmq_direct [RUNS]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "jupyter/execute.h"
#include "jupyter/kernel_client.h"
#include "sys/epoll_reactor.h"
#include "sys/timerfd.h"

using namespace cordon;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 30;
  char tmpl[] = "/tmp/cordon-zmq.XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto reactor = sys::EpollReactor::Create();
  auto connection = jupyter::WriteConnection(dir + "/run", dir + "/run");
  if (!reactor || !connection) return 2;
  auto start = Clock::now();
  pid_t kernel = ::fork();
  if (kernel == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl("/usr/bin/python3", "python3", "-m", "ipykernel_launcher", "-f",
            connection->file.c_str(), nullptr);
    ::_exit(127);
  }
  jupyter::ZmqContext context;
  std::optional<jupyter::ExecuteCollector> collector;
  bool info = false, iopub = false;
  auto client = jupyter::KernelClient::Connect(*reactor, context, *connection,
                                               [&](jupyter::Channel ch, const jupyter::Message& m) {
                                                 if (collector) collector->Feed(ch, m);
                                                 if (m.msg_type() == "kernel_info_reply")
                                                   info = true;
                                                 if (ch == jupyter::Channel::kIopub) iopub = true;
                                               },
                                               {});
  if (!client) return 2;
  auto timer = sys::TimerFd::Create();
  (void)(*reactor).Watch(timer->fd(), [&] {
    timer->Consume();
    if (!(info && iopub))
      (void)(*client)->Send(jupyter::Channel::kShell, (*client)->Make("kernel_info_request"));
    (void)timer->Arm(std::chrono::milliseconds(50));
  });
  (void)timer->Arm(std::chrono::milliseconds(1));
  (void)reactor->RunUntil([&] { return info && iopub; });
  auto ready = Clock::now();

  auto execute = [&] {
    auto request = (*client)->Make("execute_request", {{"code", "1+1"}, {"silent", false}});
    collector.emplace(request.msg_id(), 1 << 20);
    (void)(*client)->Send(jupyter::Channel::kShell, request);
    (void)reactor->RunUntil([&] { return collector->complete(); });
  };
  execute();
  auto first = Clock::now();
  std::vector<double> trips;
  for (int i = 0; i < runs; ++i) {
    auto s = Clock::now();
    execute();
    trips.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  std::sort(trips.begin(), trips.end());
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - start).count();
  };
  std::printf(
      "{\"create_ms\": %.2f, \"first_result_ms\": %.2f, \"round_trip_ms\": %.3f, "
      "\"runs\": %d}\n",
      ms(ready), ms(first), trips[trips.size() / 2], runs);
  reactor->Unwatch(timer->fd());
  client->reset();
  ::kill(kernel, SIGKILL);
  ::waitpid(kernel, nullptr, 0);
  std::system(("rm -rf " + dir).c_str());
  return 0;
}
