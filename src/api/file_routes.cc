#include "api/file_routes.h"

#include "api/url.h"
#include "session/files.h"

namespace cordon::api {

void ServeFiles(session::Sessions& sessions, uint64_t max_file_bytes,
                const std::vector<std::string>& seg, const Request& request,
                const std::shared_ptr<Exchange>& ex) {
  const http::verb method = request.message.method();
  auto workspace = sessions.Workspace(PercentDecode(seg[2]));
  if (!workspace) return ex->RespondError(FromSession(workspace.error()));
  const int fd = workspace->get();
  auto query = ParseQuery(request.query);
  if (seg.size() == 4) {
    if (method != http::verb::get) {
      return ex->RespondJson(405,
                             ToJson(ApiError{405, "method_not_allowed",
                                             "list a directory with GET ?dir=PATH", "", nullptr}),
                             {{"Allow", "GET"}});
    }
    auto listing = session::ListFiles(fd, query["dir"]);
    if (!listing) return ex->RespondError(FromSession(listing.error()));
    return ex->RespondJson(
        200, {{"dir", query["dir"].empty() ? "." : query["dir"]}, {"entries", *listing}});
  }
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
      auto info = session::PutFile(fd, put, request.message.body());
      if (!info) return ex->RespondError(FromSession(info.error()));
      return ex->RespondJson(put.offset && *put.offset > 0 ? 200 : 201,
                             {{"path", path},
                              {"size", info->size},
                              {"sha256", info->sha256},
                              {"mtime_ms", info->mtime_ms}});
    }
    case http::verb::get:
    case http::verb::head: {
      bool head = method == http::verb::head;
      auto content = session::GetFile(fd, path, !head, max_file_bytes);
      if (!content) {
        if (head) {
          ApiError e = FromSession(content.error());
          return ex->Respond(e.status, "", "", {}, 0);
        }
        return ex->RespondError(FromSession(content.error()));
      }
      Exchange::Headers headers = {{"X-Content-SHA256", content->info.sha256}};
      if (head) {
        return ex->Respond(200, "", "application/octet-stream", std::move(headers),
                           content->info.size);
      }
      return ex->Respond(200, std::move(content->body), "application/octet-stream",
                         std::move(headers));
    }
    case http::verb::delete_: {
      auto deleted = session::DeleteFile(fd, path);
      if (!deleted) return ex->RespondError(FromSession(deleted.error()));
      return ex->RespondJson(200, {{"path", path}, {"deleted", true}});
    }
    default:
      ex->RespondJson(405,
                      ToJson(ApiError{405, "method_not_allowed",
                                      "files take GET, HEAD, PUT and DELETE", "", nullptr}),
                      {{"Allow", "GET, HEAD, PUT, DELETE"}});
  }
}

}  // namespace cordon::api
