#include "session/kernel.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "contain/grant.h"
#include "jupyter/connection.h"
#include "session/kernel_dir.h"
#include "store/store.h"
#include "sys/fd.h"
#include "sys/json_text.h"
#include "sys/random.h"

namespace cordon::session {
namespace {

using Clock = std::chrono::steady_clock;
using jupyter::Channel;

constexpr std::chrono::milliseconds kInfoRetry{200};
// How many retries in a row may find the daemon without a descriptor to
// spare (see Kernel::AskInfo) before the start is given up: 1 s.
constexpr int kStarvedRetries = 5;
constexpr size_t kTailBytes = 2048;

// What `python -c` runs: ipykernel_launcher's two steps (cwd off sys.path
// while ipykernel loads; IPython puts it back), after making OutStream
// publish at most CHUNK characters per message. ipykernel 6 buffers what
// is written for 0.2 s and sends it as one message; a print loop makes
// those hundreds of megabytes, which the kernel, then the daemon, would
// each hold whole. A write is cut into chunks, and a full buffer is
// flushed at once: flush() waits for the I/O thread to send it, so a
// flooding writer goes at the pace of its own I/O thread.
//
// Then the pipe through which ipykernel 6.17 takes what the kernel's
// children write to fd 1 and 2 (one per stream, read on a thread of its
// own). The flush at a cell's end did not wait for that thread, so what was
// still in the pipe followed the idle status and was no execution's output;
// a print() could come before what a child had written earlier; and bytes
// that were not UTF-8 ended the thread (later children's output was lost,
// and a child that filled the pipe hung). Here the pipe is read under a
// lock, by that thread and, first, by flush() and write() on the kernel's
// other threads but the I/O thread: flush() always, write() when the pipe
// holds anything, looked at (one ioctl) at most once a millisecond. The text
// is decoded incrementally, and what is not UTF-8 is replaced.
constexpr const char* kLauncher = R"py(import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import codecs, fcntl, os, select, termios, threading, time
from ipykernel import iostream, kernelapp
def _cordon_chunked(write, chunk):
    def write_chunked(self, string):
        if not isinstance(string, str):
            return write(self, string)
        for i in range(0, max(len(string), 1), chunk):
            write(self, string[i:i + chunk])
            with self._buffer_lock:
                full = self._buffer.tell() >= chunk
            if full:
                self.flush()
        return len(string)
    return write_chunked
iostream.OutStream.write = _cordon_chunked(iostream.OutStream.write, CHUNK)
del _cordon_chunked
def _cordon_pipe(OutStream):
    setup, write, flush = OutStream._setup_stream_redirects, OutStream.write, OutStream.flush
    none = bytes(4)
    def waiting(fid):
        return int.from_bytes(fcntl.ioctl(fid, termios.FIONREAD, none), sys.byteorder)
    def setup_locked(self, name):
        self._cordon_lock = threading.Lock()
        self._cordon_text = codecs.getincrementaldecoder("utf-8")("replace")
        setup(self, name)
        self._cordon_fid = self._fid
    def pump(self):
        taken = []
        with self._cordon_lock:
            self._cordon_pumper = threading.current_thread()
            try:
                left = waiting(self._fid)  # no more: a writer that never stops cannot hold it
                while left > 0:
                    data = os.read(self._fid, min(left, 65536))
                    if not data:
                        break
                    left -= len(data)
                    text = self._cordon_text.decode(data)
                    if text:
                        write(self, text)
                    taken.append(data)
            finally:
                self._cordon_pumper = None
        try:  # the copy to the kernel's own stdout or stderr, as ipykernel makes
            for data in taken:
                while data:
                    data = data[os.write(self._original_stdstream_copy, data):]
        except OSError:
            pass
        return len(taken)
    def watch(self):
        try:
            ready = select.poll()
            ready.register(self._fid, select.POLLIN)
            while self._should_watch:
                events = ready.poll()
                if not pump(self) and any(e & ~select.POLLIN for _, e in events):
                    break  # every writer closed the pipe
        except Exception:
            self._exc = sys.exc_info()
    def pipe_first(self):
        pub, me = self.pub_thread, threading.current_thread()
        if (pub is not None and self._is_master_process() and me is not self._cordon_pumper
                and me is not pub.thread):
            pump(self)
    def write_pipe_first(self, string):
        # At most once a millisecond (the ioctl lets other threads take the
        # interpreter), or while the reader holds what it took; the pipe is
        # looked at before the reader, which may have taken from it and not
        # yet written.
        if self._cordon_fid is not None:
            now = time.monotonic()
            if now >= self._cordon_next_look or self._cordon_pumper:
                self._cordon_next_look = now + 0.001
                if waiting(self._cordon_fid) or self._cordon_pumper:
                    pipe_first(self)
        return write(self, string)
    def flush_pipe_first(self):
        if self._cordon_fid is not None:
            pipe_first(self)
        flush(self)
    OutStream._cordon_fid = OutStream._cordon_pumper = None  # until the pipe is made
    OutStream._cordon_next_look = 0.0
    OutStream._setup_stream_redirects = setup_locked
    OutStream._watch_pipe_fd = watch
    OutStream.write = write_pipe_first
    OutStream.flush = flush_pipe_first
if all(hasattr(iostream.OutStream, name) for name in ("_setup_stream_redirects", "_watch_pipe_fd")):
    _cordon_pipe(iostream.OutStream)
del _cordon_pipe
kernelapp.launch_new_instance()
)py";

std::string Launcher() {
  std::string code = kLauncher;
  code.replace(code.find("CHUNK)"), 5, std::to_string(kStreamChunk));
  return code;
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::unexpected<contain::AdmitError> Internal(const std::string& message) {
  return std::unexpected(
      contain::AdmitError{contain::AdmitError::Kind::kInternal, "", message, {}});
}

// Python sessions cannot be had from this daemon as it is set up: like a
// daemon without the kernel runtime (sessions.cc), the value of `kind` is
// what cannot be served (400), and the message says what the operator does.
std::unexpected<contain::AdmitError> Unservable(const std::string& message) {
  return std::unexpected(
      contain::AdmitError{contain::AdmitError::Kind::kInvalid, "kind", message, {}});
}

// A warning in the daemon's log (api/log.h's line shape: this library does
// not link the front door).
void LogWarning(const std::string& event, const nlohmann::json& fields) {
  nlohmann::json line = {{"ts_ms", store::NowMs()}, {"level", "warning"}, {"event", event}};
  for (const auto& [key, value] : fields.items()) line[key] = value;
  (void)sys::WriteAll(STDERR_FILENO, sys::JsonText(line) + "\n");
}

// The daemon connects to the kernel's sockets through hard links in a
// directory of its own (`<runtime dir>.links`, 0700, never bound into the
// sandbox), never through the names in the runtime directory: the kernel
// owns that directory and can replace a socket with a symbolic link to a
// host socket, which libzmq would follow when it connects again after a
// dropped connection (the CVE-2024-42472 pattern; issue 13, case 9). Each
// name is linked once the kernel has bound it, and only a socket:
// linkat(2) without AT_SYMLINK_FOLLOW links a symbolic link itself, which
// is then seen for what it is and dropped. A linked name stays the inode
// the kernel bound, whatever the sandbox does to the original name later.
// Called while the kernel starts and at every heartbeat (its heartbeat
// socket is bound on a thread of its own, possibly after the others).
void LinkSockets(const std::string& runtime_dir) {
  const std::string links = runtime_dir + ".links";
  for (int port = 1; port <= 5; ++port) {  // jupyter::Connection's fixed ports
    const std::string name = "k-" + std::to_string(port);
    const std::string linked = links + "/" + name;
    struct stat st {};
    if (::lstat(linked.c_str(), &st) == 0) continue;
    const std::string temp = links + "/t-" + std::to_string(port);
    ::unlink(temp.c_str());
    if (::linkat(AT_FDCWD, (runtime_dir + "/" + name).c_str(), AT_FDCWD, temp.c_str(), 0) != 0) {
      continue;  // not bound yet
    }
    if (::lstat(temp.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      ::rename(temp.c_str(), linked.c_str());
    } else {
      ::unlink(temp.c_str());
    }
  }
}

void SetEnv(contain::Spec& spec, const std::string& name, const std::string& value) {
  for (auto& [n, v] : spec.env) {
    if (n == name) {
      v = value;
      return;
    }
  }
  spec.env.emplace_back(name, value);
}

}  // namespace

RuntimeFactory MakeKernelFactory(KernelContext context) {
  // What an earlier daemon left: its kernels were reaped before this one
  // answers, their sockets and connection files are stale.
  // (It is made again when a kernel starts.)
  std::error_code ec;
  std::filesystem::remove_all(context.runtime_root, ec);
  // Known at start: a runtime root that cannot be made fails every python
  // session (each tries again, so one made later by the operator works).
  if (auto ready = PrepareRuntimeRoot(context.runtime_root); !ready) {
    LogWarning("python_sessions_unavailable", {{"runtime_dir", context.runtime_root},
                                               {"message", ready.error().what()},
                                               {"fix", RuntimeRootFix(context.runtime_root)}});
  }
  return [context](const std::string& session_id, contain::Spec spec, Runtime::Events events,
                   ReleaseElsewhere release_elsewhere)
             -> std::expected<std::unique_ptr<Runtime>, contain::AdmitError> {
    auto kernel = Kernel::Spawn(context, session_id, std::move(spec), std::move(events),
                                std::move(release_elsewhere));
    if (!kernel) return std::unexpected(kernel.error());
    return std::unique_ptr<Runtime>(std::move(*kernel));
  };
}

std::expected<std::unique_ptr<Kernel>, contain::AdmitError> Kernel::Spawn(
    const KernelContext& context, const std::string& session_id, contain::Spec spec, Events events,
    ReleaseElsewhere release_elsewhere) {
  std::unique_ptr<Kernel> k(new Kernel(context, session_id, std::move(events)));

  // A private runtime directory, 0700; short, for the socket paths. The
  // root is traversable, not listable: a sandbox's root must reach its own
  // directory to bind it, and nothing else there.
  if (auto ready = PrepareRuntimeRoot(context.runtime_root); !ready) {
    return Unservable(ready.error().what());
  }
  k->runtime_dir_ = context.runtime_root + "/" + sys::RandomHex(6);
  if (::mkdir(k->runtime_dir_.c_str(), 0700) != 0) {
    const std::string dir = k->runtime_dir_;
    k->runtime_dir_.clear();  // not ours to remove
    return Internal(sys::Error::FromErrno("mkdir(\"" + dir + "\")").message());
  }
  const bool isolated = spec.isolation.enabled();
  if (isolated) spec.isolation.binds.push_back({k->runtime_dir_, kKernelDir, true});
  spec.shell.reset();
  spec.stdin_bytes.reset();
  spec.limits.timeout_ms.reset();
  spec.limits.grace_ms = 0;  // a teardown kills at once, as for a shell
  spec.argv = {context.python, "-Xfrozen_modules=off", "-c", Launcher()};  // completed below

  auto grant = contain::Acquire(spec, *context.probe, *context.store);
  if (!grant) return std::unexpected(grant.error());
  // Where the kernel sees its directory: bound at kKernelDir when it has a
  // mount namespace, else at its own path.
  const bool namespaced = grant->isolation && grant->isolation->namespaces;
  const std::string kernel_dir = namespaced ? std::string(kKernelDir) : k->runtime_dir_;
  auto connection = jupyter::WriteConnection(k->runtime_dir_, kernel_dir);
  if (!connection) {
    (void)context.store->RecordRelease(grant->id, "setup_failed", nlohmann::json::object(), true);
    if (grant->cgroups) (void)grant->cgroups->Remove();
    return Internal("the kernel's connection file: " + connection.error().message());
  }
  // Where the daemon connects: the links LinkSockets makes, never the
  // kernel's own names.
  const std::string links_dir = k->runtime_dir_ + ".links";
  const bool too_long = links_dir.size() + 5 > sizeof(sockaddr_un{}.sun_path) - 1;
  if (too_long || ::mkdir(links_dir.c_str(), 0700) != 0) {
    const std::string why = too_long ? "the path is too long for a unix socket; choose a "
                                       "shorter runtime directory"
                                     : std::string("mkdir: ") + std::strerror(errno);
    (void)context.store->RecordRelease(grant->id, "setup_failed", nlohmann::json::object(), true);
    if (grant->cgroups) (void)grant->cgroups->Remove();
    return Internal("the daemon's links to the kernel's sockets (\"" + links_dir + "\"): " + why);
  }
  connection->ip = links_dir + "/k";
  // The sandbox's root is this outside id (or, without a user namespace,
  // the uid it runs as): the directory and the file are its own (0700 /
  // 0600), no one else's.
  const bool own_ids = grant->isolation && grant->isolation->outside_uid != ::geteuid();
  if (own_ids) {
    uid_t uid = grant->isolation->outside_uid;
    gid_t gid = grant->isolation->outside_gid;
    if (::chown(k->runtime_dir_.c_str(), uid, gid) != 0 ||
        ::chown(connection->file.c_str(), uid, gid) != 0) {
      (void)context.store->RecordRelease(grant->id, "setup_failed", nlohmann::json::object(), true);
      if (grant->cgroups) (void)grant->cgroups->Remove();
      return Internal("chown of the kernel's runtime directory: " + std::string(strerror(errno)));
    }
  }
  // The ipython dir (profile, history) is the kernel's own, not the
  // workspace's; frozen modules off keeps the debugger's warning out.
  const std::string ipython_dir = k->runtime_dir_ + "/ipython";
  ::mkdir(ipython_dir.c_str(), 0700);
  if (own_ids) {
    (void)::chown(ipython_dir.c_str(), grant->isolation->outside_uid,
                  grant->isolation->outside_gid);
  }
  spec.argv = {context.python,
               "-Xfrozen_modules=off",
               "-c",
               Launcher(),
               "-f",
               kernel_dir + "/connection.json",
               "--ipython-dir=" + kernel_dir + "/ipython"};
  SetEnv(spec, "JUPYTER_RUNTIME_DIR", kernel_dir);
  SetEnv(spec, "JUPYTER_DATA_DIR", kernel_dir + "/data");

  Kernel* self = k.get();
  run::ExecutionOptions options;
  options.verify_timeout = context.verify_timeout;
  options.keep_output = false;
  options.on_output = [self](run::StreamId, std::string_view bytes) {
    self->output_tail_.append(bytes);
    if (self->output_tail_.size() > 2 * kTailBytes) {
      self->output_tail_.erase(0, self->output_tail_.size() - kTailBytes);
    }
  };
  options.release_elsewhere = std::move(release_elsewhere);
  auto execution = run::Execution::Spawn(*context.reactor, *context.store, *context.signaller,
                                         std::move(*grant), spec, std::move(options),
                                         [self](run::RunResult r) { self->OnDone(std::move(r)); });
  if (!execution) return Internal(execution.error().message());
  k->execution_ = std::move(*execution);
  k->connection_ = std::move(*connection);
  return k;
}

sys::Result<void> Kernel::Attach() {
  for (auto* alarm : {&alarm_, &heartbeat_, &interrupt_}) {
    CORDON_ASSIGN_OR_RETURN(*alarm, Alarm::Create(*context_.reactor));
  }
  Kernel* self = this;
  jupyter::ClientOptions client_options;
  client_options.max_message_bytes = context_.max_message_bytes;
  client_options.on_reset = [self](Channel ch) { self->OnReset(ch); };
  // Only while starting: stdin may connect after shell has answered (see
  // ClientOptions::on_connected), and an input() right after the ready
  // would then never reach its client.
  client_options.on_connected = [self](Channel) { self->MaybeReady(); };
  CORDON_ASSIGN_OR_RETURN(
      client_, jupyter::KernelClient::Connect(
                   *context_.reactor, *context_.zmq, *connection_,
                   [self](Channel ch, const jupyter::Message& m) { self->OnMessage(ch, m); },
                   [self](Channel ch, const std::string& why) {
                     // A message that failed verification is dropped, never believed.
                     if (self->context_.listener) {
                       self->context_.listener->OnKernelDropped(self->session_id_, ch, why);
                     }
                   },
                   [self] { self->ping_outstanding_ = false; }, std::move(client_options)));
  CORDON_RETURN_IF_ERROR(execution_->Attach());
  alarm_->Set(context_.ready_timeout, [self] {
    if (self->phase_ != Phase::kStarting) return;
    const std::string within = std::to_string(self->context_.ready_timeout.count()) + " ms";
    self->Escalate(self->info_ && self->iopub_seen_
                       ? "the kernel answered kernel_info_request, but its shell, control and "
                         "stdin channels were not all connected within " +
                             within
                       : "the kernel did not answer kernel_info_request within " + within);
  });
  AskInfo();
  return {};
}

Kernel::~Kernel() {
  client_.reset();
  execution_.reset();
  std::error_code ec;
  if (!runtime_dir_.empty()) {
    std::filesystem::remove_all(runtime_dir_ + ".links", ec);
    std::filesystem::remove_all(runtime_dir_, ec);
  }
}

void Kernel::AskInfo() {
  if (phase_ != Phase::kStarting) return;
  // libzmq connects on its own thread, and where it cannot make a socket
  // (the daemon out of descriptors) it retries unseen until the ready
  // timeout: the start is given up after a second of that instead, saying
  // why.
  if (!client_->connected()) {
    auto spare = sys::SpareSocket();
    starved_retries_ = spare ? 0 : starved_retries_ + 1;
    if (starved_retries_ >= kStarvedRetries) {
      Escalate("the daemon could not make a socket for its connections to the kernel for " +
               std::to_string(kStarvedRetries * kInfoRetry.count()) +
               " ms: " + spare.error().message());
      return;
    }
  }
  LinkSockets(runtime_dir_);
  // Once answered, what is left is the channels' connecting (MaybeReady;
  // the links above go on being made): another request would only put
  // more statuses on every client's iopub.
  if (!(info_ && iopub_seen_)) {
    jupyter::Message request = client_->Make("kernel_info_request");
    info_requests_.insert(request.msg_id());
    (void)client_->Send(Channel::kShell, request);
    if (phase_ != Phase::kStarting) return;  // the reply may have come at once
  }
  heartbeat_->Set(kInfoRetry, [this] { AskInfo(); });
}

void Kernel::OnMessage(Channel channel, const jupyter::Message& m) {
  if (phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  const std::string type = m.msg_type();
  if (channel == Channel::kIopub) {
    last_iopub_ = Clock::now();
    // The daemon's own kernel_info_requests (readiness retries that the
    // kernel may still be answering) do not make it look busy.
    if (type == "status" && !info_requests_.contains(m.parent_msg_id())) {
      std::string state = m.content.value("execution_state", "");
      if (state == "idle" || state == "busy" || state == "starting") execution_state_ = state;
      if (state == "idle") {
        busy_hint_ = false;
        interrupt_->Cancel();
      }
    }
  }
  if (phase_ == Phase::kStarting) {
    // Ready once a kernel_info_request of ours was answered and its idle
    // seen on iopub: then the subscription has joined, and the kernel is idle.
    const bool ours = info_requests_.contains(m.parent_msg_id());
    if (channel == Channel::kShell && type == "kernel_info_reply" && ours) info_ = true;
    if (channel == Channel::kIopub && type == "status" && ours &&
        m.content.value("execution_state", "") == "idle") {
      iopub_seen_ = true;
    }
  }
  if (context_.listener) context_.listener->OnKernelMessage(session_id_, channel, m);
  if (phase_ == Phase::kStarting) return MaybeReady();
  if (collector_ && channel == Channel::kIopub && type == "execute_input" &&
      m.parent_msg_id() == collector_->msg_id()) {
    // The kernel now handles SIGINT for this execution (before, it ignores
    // it): an interrupt that was due is sent now.
    begun_ = true;
    if (interrupt_due_) {
      interrupt_due_ = false;
      (void)execution_->Interrupt(SIGINT);
    }
  }
  if (!probe_.empty() && m.parent_msg_id() == probe_ && OnProbe(channel, type)) return;
  if (collector_ && (phase_ == Phase::kRunning || phase_ == Phase::kDraining)) {
    // After a gap nothing more is kept (it would look as if it followed).
    const bool output = type == "stream" || type == "display_data" || type == "execute_result" ||
                        type == "update_display_data";
    if (output_lost_ && channel == Channel::kIopub && output) return;
    if (request_.on_output && channel == Channel::kIopub && type == "stream" &&
        m.parent_msg_id() == collector_->msg_id()) {
      auto text = m.content.find("text");
      if (text != m.content.end() && text->is_string()) {
        request_.on_output(text->get_ref<const std::string&>());
      }
    }
    if (collector_->Feed(channel, m)) return Finish();
    if (collector_->over_budget() && phase_ == Phase::kRunning) {
      Drain(request_.grace,
            "the kernel did not come back to idle within the grace after its "
            "output went over the budget and it was interrupted");
    }
  }
}

void Kernel::MaybeReady() {
  // client_ is null while KernelClient::Connect still runs (its first look
  // at each monitor may report a handshake already).
  if (phase_ == Phase::kStarting && info_ && iopub_seen_ && client_ && client_->connected()) {
    OnReady();
  }
}

void Kernel::OnReady() {
  phase_ = Phase::kIdle;
  if (execution_state_ == "starting") execution_state_ = "idle";
  alarm_->Cancel();
  heartbeat_->Cancel();
  heartbeat_->Set(context_.heartbeat_interval, [this] { Heartbeat(); });
  if (events_.ready) events_.ready();
  if (context_.listener) context_.listener->OnKernelReady(session_id_);
}

void Kernel::Heartbeat() {
  if (phase_ == Phase::kStarting || phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  LinkSockets(runtime_dir_);
  if (ping_outstanding_) {
    if (Clock::now() - ping_sent_ > context_.heartbeat_timeout) {
      return Escalate("the kernel stopped answering its heartbeat for " +
                      std::to_string(context_.heartbeat_timeout.count()) + " ms");
    }
  } else {
    // Outstanding before the send: Ping() reads what is there at once, and
    // the echo may already be (a loaded machine preempts the daemon between
    // the two), whose handler must find the flag set to clear it.
    ping_outstanding_ = true;
    ping_sent_ = Clock::now();
    if (!client_->Ping()) ping_outstanding_ = false;
  }
  // Busy, but nothing published for a while: its `idle` may have been
  // dropped (ZeroMQ drops past the high-water mark when the daemon reads
  // slower than a flooding kernel writes). A probe finds out; for a kernel
  // that is only computing it waits its turn on shell, harmlessly.
  if ((running() || busy_hint_ || execution_state_ == "busy") &&
      Clock::now() - last_iopub_ >= context_.heartbeat_interval) {
    Probe();
  }
  heartbeat_->Set(context_.heartbeat_interval, [this] { Heartbeat(); });
}

void Kernel::Exec(ExecRequest request, std::function<void(ExecResult)> done) {
  request_ = std::move(request);
  exec_done_ = std::move(done);
  phase_ = Phase::kRunning;
  timed_out_ = false;
  begun_ = false;
  interrupt_due_ = false;
  output_lost_ = false;
  lost_why_.clear();
  exec_started_ = Clock::now();
  jupyter::Message m =
      client_->Make("execute_request", {{"code", request_.command},
                                        {"silent", false},
                                        {"store_history", true},
                                        {"user_expressions", nlohmann::json::object()},
                                        {"allow_stdin", false},
                                        {"stop_on_error", false}});
  collector_.emplace(m.msg_id(), request_.output_limit);
  alarm_->Set(request_.timeout, [this] { OnDeadline(); });
  if (auto sent = client_->Send(Channel::kShell, m); !sent) {
    why_ = "the execution could not be sent to the kernel: " + sent.error().message();
    ending_ = End::kInvalidated;
    Kill();
  }
}

ExecResult Kernel::TakeResult() {
  request_.on_output = nullptr;  // what it holds is the caller's: not kept past the end
  ExecResult r;
  if (collector_) {
    r.kernel = collector_->Take();
    collector_.reset();
  } else {
    r.kernel.emplace();
  }
  if (r.kernel->status.empty()) r.kernel->status = "error";
  if (output_lost_) {
    r.kernel->truncated = true;
    r.kernel->stdout_text += "\n[cordon: output cut: " + lost_why_ + "]\n";
  }
  r.timed_out = timed_out_;
  r.duration_ms = MsSince(exec_started_);
  return r;
}

void Kernel::Finish() {
  alarm_->Cancel();
  phase_ = Phase::kIdle;
  ExecResult result = TakeResult();
  std::function<void(ExecResult)> done = std::move(exec_done_);
  exec_done_ = nullptr;
  done(std::move(result));
}

// SIGINT, then `grace` for the execution's reply and idle; else teardown.
void Kernel::Drain(std::chrono::milliseconds grace, const std::string& why) {
  phase_ = Phase::kDraining;
  if (begun_) {
    (void)execution_->Interrupt(SIGINT);
  } else {
    interrupt_due_ = true;  // sent when its execute_input shows it began
  }
  alarm_->Set(grace, [this, why] {
    if (phase_ != Phase::kDraining) return;
    Escalate(why);
  });
}

void Kernel::OnDeadline() {
  if (phase_ != Phase::kRunning && phase_ != Phase::kDraining) return;
  timed_out_ = true;
  Drain(request_.grace,
        "the kernel did not come back to idle within the grace after SIGINT at the deadline; "
        "its tree was torn down");
}

bool Kernel::Interrupt() {
  if (phase_ != Phase::kIdle && phase_ != Phase::kRunning && phase_ != Phase::kDraining) {
    return false;
  }
  bool was_busy = busy();
  if (!execution_->Interrupt(SIGINT)) return false;
  if (was_busy && !interrupt_->armed()) {
    interrupt_->Set(context_.interrupt_grace, [this] {
      Escalate("the kernel did not come back to idle within " +
               std::to_string(context_.interrupt_grace.count()) +
               " ms after an interrupt; its tree was torn down");
    });
  }
  return true;
}

sys::Result<void> Kernel::Forward(Channel channel, jupyter::Message message) {
  if (phase_ != Phase::kIdle && phase_ != Phase::kRunning && phase_ != Phase::kDraining) {
    return sys::Fail("the kernel is not running", ESRCH);
  }
  if (channel != Channel::kShell && channel != Channel::kControl && channel != Channel::kStdin) {
    return sys::Fail("messages can only be sent on shell, control and stdin", EINVAL);
  }
  if (channel == Channel::kShell && message.msg_type() == "execute_request") busy_hint_ = true;
  message.identities.clear();
  CORDON_ASSIGN_OR_RETURN(std::string id, client_->Send(channel, message));
  (void)id;
  return {};
}

void Kernel::Describe(nlohmann::json& view) const {
  std::string state = execution_state_;
  if (running() || busy_hint_) state = "busy";
  if (phase_ == Phase::kStarting) state = "starting";
  view["execution_state"] = state;
}

void Kernel::Escalate(const std::string& why) {
  if (phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  why_ = why;
  ending_ = End::kInvalidated;
  Kill();
}

void Kernel::Kill() {
  if (phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  if (ending_ != End::kInvalidated) ending_ = End::kKilled;
  phase_ = Phase::kEnding;
  alarm_->Cancel();
  heartbeat_->Cancel();
  interrupt_->Cancel();
  execution_->Cancel();
}

void Kernel::OnDone(run::RunResult run) {
  const bool was_starting = phase_ == Phase::kStarting;
  const bool was_running = running() || (phase_ == Phase::kEnding && exec_done_);
  if (phase_ != Phase::kEnding) ending_ = End::kExited;
  phase_ = Phase::kEnded;
  execution_state_ = "dead";
  alarm_->Cancel();
  heartbeat_->Cancel();
  interrupt_->Cancel();
  Ended ended{ending_, std::move(run), std::nullopt, nullptr, why_};
  if (ending_ == End::kExited) {
    std::string how = ended.run.exit_code ? "exit status " + std::to_string(*ended.run.exit_code)
                      : ended.run.signal  ? "signal " + std::to_string(*ended.run.signal)
                                          : "no status";
    if (ended.run.setup_error) {
      const contain::SetupError& e = *ended.run.setup_error;
      how = "setup failed at " + std::string(contain::SetupStepName(e.step)) +
            (e.detail.empty() ? "" : " (" + e.detail + ")") + ": " + std::strerror(e.err);
    }
    std::string tail = output_tail_.size() > kTailBytes
                           ? output_tail_.substr(output_tail_.size() - kTailBytes)
                           : output_tail_;
    ended.why = (was_starting ? "the kernel exited during startup (" : "the kernel died (") + how +
                ")" + (tail.empty() ? "" : ": " + tail);
  }
  if (was_running && exec_done_) {
    ended.exec = TakeResult();
    ended.exec_done = std::move(exec_done_);
    exec_done_ = nullptr;
  }
  if (context_.listener) context_.listener->OnKernelEnded(session_id_);
  events_.ended(std::move(ended));
}

void Kernel::OnReset(Channel channel) {
  if (phase_ == Phase::kStarting || phase_ == Phase::kEnding || phase_ == Phase::kEnded) return;
  const std::string why =
      "the kernel's " + std::string(jupyter::ChannelName(channel)) +
      " connection was reset, and what was in flight on it was lost (a message over " +
      std::to_string(context_.max_message_bytes) +
      " bytes, the larger of --max-message-size and 64 MiB, ends its connection; or the "
      "kernel was ending)";
  if (context_.listener && Clock::now() - reset_noticed_ >= std::chrono::seconds(1)) {
    reset_noticed_ = Clock::now();
    context_.listener->OnKernelReset(session_id_, channel, why);
  }
  if (collector_ && running() && !output_lost_) {
    output_lost_ = true;
    lost_why_ = why;
    // As at the budget: interrupted, and given the grace to be idle again.
    // Its execute_input may have been among the lost: SIGINT goes now, and
    // again if that execute_input still comes (Drain leaves it due).
    if (phase_ == Phase::kRunning) {
      if (!begun_) (void)execution_->Interrupt(SIGINT);
      Drain(request_.grace,
            "the kernel did not come back to idle within the grace after its output was cut "
            "(a connection reset) and it was interrupted");
    }
  }
  Probe();
}

void Kernel::Probe() {
  if (!probe_.empty()) return;
  jupyter::Message probe = client_->Make("kernel_info_request");
  probe_ = probe.msg_id();
  probe_for_ = collector_ && running() ? collector_->msg_id() : "";
  probe_replied_ = probe_published_ = false;
  if (!client_->Send(Channel::kShell, probe)) {
    probe_.clear();
    probe_for_.clear();
  }
}

bool Kernel::OnProbe(Channel channel, const std::string& type) {
  if (channel == Channel::kShell && type == "kernel_info_reply") probe_replied_ = true;
  if (channel == Channel::kIopub && type == "status") probe_published_ = true;
  // After a reset iopub itself may have lost the probe's statuses: its
  // reply (shell, after the execution's own) is enough then.
  if (!probe_replied_ || !(probe_published_ || output_lost_)) return false;
  const bool ends_exec = collector_ && running() && collector_->msg_id() == probe_for_;
  probe_.clear();
  probe_for_.clear();
  if (!ends_exec) return false;
  if (!output_lost_ && !collector_->complete()) {
    // Its reply or its idle never came. An idle without a reply is the
    // kernel's own doing: ipykernel logs and drops a request that SIGINT
    // reached before its code ran (a slow host widens that window). An idle
    // that never came was dropped, as a PUB socket drops past its
    // high-water mark when the reader is slower.
    output_lost_ = true;
    lost_why_ = collector_->idle() && !collector_->replied()
                    ? "the kernel went back to idle without replying to this execution "
                      "(ipykernel drops a request that an interrupt reaches before its code "
                      "runs): the code may not have run"
                    : "the kernel published faster than the daemon could read, and dropped "
                      "messages (its `idle` among them): output may be missing";
  }
  Finish();
  return true;
}

void Kernel::RetryRelease(std::function<void(const contain::Release&)> retried) {
  execution_->RetryRelease(std::move(retried));
}

}  // namespace cordon::session
