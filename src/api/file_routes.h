// The files routes of a session (/v1/sessions/{id}/files...): HTTP in and
// out of session/files, which holds every rule.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "api/http.h"
#include "session/sessions.h"

namespace cordon::api {

// `segments`: the path's segments, "v1", "sessions", id, "files", ...
// The request's body is taken (an upload's bytes are written on a worker:
// Sessions::WithWorkspace).
void ServeFiles(session::Sessions& sessions, uint64_t max_file_bytes,
                const std::vector<std::string>& segments, Request& request,
                const std::shared_ptr<Exchange>& exchange);

}  // namespace cordon::api
