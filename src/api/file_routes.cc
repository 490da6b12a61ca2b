#include "api/file_routes.h"

#include "api/url.h"
#include "session/files.h"

namespace cordon::api {
namespace {

// How a request is answered, made on a worker with the workspace (a
// file's bytes hashed and written or read there) and sent on the loop.
using Answer = std::function<void(Exchange& ex)>;
using Work = std::function<Answer(int workspace_fd)>;

Answer Failed(const session::Error& error) {
  return [e = FromSession(error)](Exchange& ex) { ex.RespondError(e); };
}

Answer NotAllowed(const char* message, const char* allow) {
  return [=](Exchange& ex) {
    ex.RespondJson(405, ToJson(ApiError{405, "method_not_allowed", message, "", nullptr}),
                   {{"Allow", allow}});
  };
}

}  // namespace

void ServeFiles(session::Sessions& sessions, uint64_t max_file_bytes,
                const std::vector<std::string>& seg, Request& request,
                const std::shared_ptr<Exchange>& ex) {
  const http::verb method = request.message.method();
  auto query = ParseQuery(request.query);
  Work work;
  if (seg.size() == 4) {
    if (method != http::verb::get) {
      return NotAllowed("list a directory with GET ?dir=PATH", "GET")(*ex);
    }
    work = [dir = query["dir"]](int fd) -> Answer {
      auto listing = session::ListFiles(fd, dir);
      if (!listing) return Failed(listing.error());
      return [dir, entries = std::move(*listing)](Exchange& ex) {
        ex.RespondJson(200, {{"dir", dir.empty() ? "." : dir}, {"entries", entries}});
      };
    };
  } else {
    std::string path;
    for (size_t i = 4; i < seg.size(); ++i) path += (i > 4 ? "/" : "") + PercentDecode(seg[i]);
    switch (method) {
      case http::verb::put: {
        session::PutRequest put;
        put.path = path;
        put.max_bytes = max_file_bytes;
        if (query.contains("offset")) {
          const std::string& text = query["offset"];
          std::optional<uint64_t> offset = ParseByteCount(text);
          if (!offset) {
            return ex->RespondError(
                Invalid("offset", "offset: must be a byte count, got \"" + text + "\""));
          }
          put.offset = *offset;
        }
        std::string digest(request.message["X-Content-SHA256"]);
        if (!digest.empty()) put.sha256 = digest;
        work = [put, body = std::make_shared<std::string>(std::move(request.message.body()))](
                   int fd) -> Answer {
          auto info = session::PutFile(fd, put, *body);
          if (!info) return Failed(info.error());
          return [put, info = *info](Exchange& ex) {
            ex.RespondJson(put.offset && *put.offset > 0 ? 200 : 201,
                           {{"path", put.path},
                            {"size", info.size},
                            {"sha256", info.sha256},
                            {"mtime_ms", info.mtime_ms}});
          };
        };
        break;
      }
      case http::verb::get:
      case http::verb::head: {
        const bool head = method == http::verb::head;
        work = [path, head, max_file_bytes](int fd) -> Answer {
          auto content = session::GetFile(fd, path, !head, max_file_bytes);
          if (!content && head) {
            return [status = FromSession(content.error()).status](Exchange& ex) {
              ex.Respond(status, "", "", {}, 0);
            };
          }
          if (!content) return Failed(content.error());
          return [head, content = std::make_shared<session::FileContent>(std::move(*content))](
                     Exchange& ex) {
            Exchange::Headers headers = {{"X-Content-SHA256", content->info.sha256}};
            if (head) {
              return ex.Respond(200, "", "application/octet-stream", std::move(headers),
                                content->info.size);
            }
            ex.Respond(200, std::move(content->body), "application/octet-stream",
                       std::move(headers));
          };
        };
        break;
      }
      case http::verb::delete_:
        work = [path](int fd) -> Answer {
          auto deleted = session::DeleteFile(fd, path);
          if (!deleted) return Failed(deleted.error());
          return [path](Exchange& ex) { ex.RespondJson(200, {{"path", path}, {"deleted", true}}); };
        };
        break;
      default:
        return NotAllowed("files take GET, HEAD, PUT and DELETE", "GET, HEAD, PUT, DELETE")(*ex);
    }
  }
  sessions.WithWorkspace<Answer>(PercentDecode(seg[2]), std::move(work),
                                 [ex](session::Outcome<Answer> answer) {
                                   if (!answer) return Failed(answer.error())(*ex);
                                   (*answer)(*ex);
                                 });
}

}  // namespace cordon::api
