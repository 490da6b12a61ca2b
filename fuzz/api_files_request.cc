// The files routes of a session (/v1/sessions/{id}/files/PATH): what
// api::ServeFiles takes from the request before any file is touched. The
// input is the request target, a newline, the X-Content-SHA256 header's
// value, a newline, and the body:
//
//   /v1/sessions/s1/files/dir%2Fa.txt?offset=0\n<64 hex digits>\nbytes
//
// The target goes through api::Segments, PercentDecode and ParseQuery (dir,
// offset), the offset through api::ParseByteCount, and the path, offset and
// digest through session::PutFile, GetFile, DeleteFile and ListFiles with a
// workspace descriptor of -1: every check that comes before a system call
// runs, and the first openat2 fails with EBADF, so nothing is ever written.
#include "api/url.h"
#include "closure/sha256.h"
#include "fuzz_support.h"
#include "session/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cordon;
  auto [target, after_target] = fuzz::Cut(fuzz::Text(data, size), "\n");
  auto [digest, body] = fuzz::Cut(after_target, "\n");

  auto [path_part, query_text] = fuzz::Cut(target, "?");
  std::string request_path(path_part);
  if (request_path.empty() || request_path.front() != '/') request_path.insert(0, "/");
  std::vector<std::string> seg = api::Segments(request_path);
  CORDON_FUZZ_CHECK(!seg.empty());
  for (const auto& s : seg) CORDON_FUZZ_CHECK(s.find('/') == std::string::npos);
  auto query = api::ParseQuery(query_text);

  std::string path;
  for (size_t i = 4; i < seg.size(); ++i) path += (i > 4 ? "/" : "") + api::PercentDecode(seg[i]);
  if (seg.size() > 2) (void)api::PercentDecode(seg[2]);

  session::PutRequest put;
  put.path = path;
  put.max_bytes = 1 << 20;
  if (query.contains("offset")) {
    auto offset = api::ParseByteCount(query["offset"]);
    if (offset) {
      // Decimal digits only: the count prints back as the text it came from
      // (up to leading zeros).
      const std::string& text = query["offset"];
      size_t zeros = text.find_first_not_of('0');
      std::string canonical = zeros == std::string::npos ? "0" : text.substr(zeros);
      CORDON_FUZZ_CHECK(std::to_string(*offset) == canonical);
      put.offset = *offset;
    }
  }
  if (!digest.empty()) put.sha256 = std::string(digest);

  auto put_result = session::PutFile(-1, put, body);
  CORDON_FUZZ_CHECK(!put_result);  // nothing can be written beneath fd -1
  if (put.sha256 && !closure::IsSha256Hex(*put.sha256)) {
    CORDON_FUZZ_CHECK(put_result.error().field == "X-Content-SHA256" ||
                      put_result.error().field == "path");
  }
  CORDON_FUZZ_CHECK(!session::GetFile(-1, path, true, 1 << 20));
  CORDON_FUZZ_CHECK(!session::DeleteFile(-1, path));
  CORDON_FUZZ_CHECK(!session::ListFiles(-1, query["dir"]));
  return 0;
}
