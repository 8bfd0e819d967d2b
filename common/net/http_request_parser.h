// The HTTP/1.x wire format of http_server.h, without sockets:
//
// Contents:
//   HttpRequestParser  - incremental: the request line and headers (strict:
//                        400 on obs-fold, a line without a colon, a bad name
//                        or control characters; 505 past HTTP/1.x; 431 past
//                        max_header_bytes), then the body by Content-Length
//                        (digits only, 413 past max_body_bytes before a byte
//                        of it is read) or chunked (decoded, bounded; other
//                        transfer codings 501; both framings 400).
//   HttpReasonPhrase   - "OK", "Not Found"... for a status.
//   HttpResponseHead   - the status line and headers of a response.
//   HttpErrorResponse  - a whole error response (Connection: close).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/net/http_server.h"

namespace pdserve {

class HttpRequestParser final {
 public:
  enum class Progress {
    kNeedMore,  // everything given was used (or kept for later): give more
    kHeadDone,  // the head is parsed and a body follows: Parse again
    kComplete,  // request() is whole; bytes past it were not consumed
    kError,     // error_status() / error_message(); the connection must close
  };

  HttpRequestParser(size_t max_header_bytes, size_t max_body_bytes);

  // Parses the start of `in`; *consumed: how many bytes of it were used (the
  // caller drops them and passes the rest, plus newer bytes, next time). A
  // head is consumed only once it is whole.
  Progress Parse(absl::string_view in, size_t* consumed);
  // Ready for the next request of the connection.
  void Reset();

  HttpRequest& request() { return request_; }
  // Whether the request asks to keep the connection (HTTP/1.1 unless
  // "Connection: close"; HTTP/1.0 only with "Connection: keep-alive").
  bool keep_alive() const { return keep_alive_; }
  // "Expect: 100-continue" on an HTTP/1.1 request with a body.
  bool expects_continue() const { return expects_continue_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class State { kHead, kLengthBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone, kError };

  Progress ParseHead(absl::string_view in, size_t* consumed);
  bool ParseRequestLine(absl::string_view line);
  bool ParseHeaderLine(absl::string_view line);
  bool ApplyFraming();
  Progress ParseBody(absl::string_view in, size_t* consumed);
  Progress ParseChunkSize(absl::string_view in, size_t* consumed);
  Progress ParseTrailers(absl::string_view in, size_t* consumed);
  Progress Fail(int status, std::string message);
  bool Reject(int status, std::string message);  // Fail, for the bool steps

  const size_t max_header_bytes_;
  const size_t max_body_bytes_;
  State state_ = State::kHead;
  size_t scan_from_ = 0;  // where to look for the end of the head next time
  HttpRequest request_;
  bool keep_alive_ = true;
  bool expects_continue_ = false;
  uint64_t remaining_ = 0;       // of the Content-Length body or of the chunk
  size_t trailer_bytes_ = 0;     // read so far
  int error_status_ = 0;
  std::string error_message_;
};

// The reason phrase of `status` ("Unknown" for a code without one here).
absl::string_view HttpReasonPhrase(int status);

// "HTTP/1.1 <status> <reason>\r\n" + Content-Type (when not empty) + either
// "Content-Length: <content_length>" (content_length >= 0), or
// "Transfer-Encoding: chunked" (chunked), or neither + Connection
// (keep-alive or close) + extra_headers (but for their Connection,
// Content-Length and Transfer-Encoding: the framing is the server's) + the
// blank line.
std::string HttpResponseHead(int status, absl::string_view content_type, int64_t content_length, bool chunked,
                             bool keep_alive, const std::vector<HttpHeader>& extra_headers);

// A whole response with Connection: close, the body {content_type, body}.
std::string HttpErrorResponse(int status, absl::string_view content_type, absl::string_view body);

}  // namespace pdserve
