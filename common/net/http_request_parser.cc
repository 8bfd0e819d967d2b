#include "common/net/http_request_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pdserve {
namespace {

// A chunk-size line (with its extensions) or one trailer line longer than
// this is refused.
constexpr size_t kMaxChunkLineBytes = 4096;

// RFC 9110 tchar: the characters of a token (method, header name).
bool IsTokenChar(unsigned char c) {
  if (absl::ascii_isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return IsTokenChar(c); });
}

absl::string_view TrimOws(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The line without its LF and the CR before it (bare LF is tolerated).
absl::string_view StripEol(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  absl::ConsumeSuffix(&line, "\r");
  return line;
}

// Where the head ends (just past its blank line) in `in`, searching from
// `from`; npos when not there yet.
size_t FindHeadEnd(absl::string_view in, size_t from) {
  for (size_t i = in.find('\n', from); i != absl::string_view::npos; i = in.find('\n', i + 1)) {
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return absl::string_view::npos;
}

// Decimal digits only, at most 19 of them; *huge when it does not fit.
bool ParseContentLength(absl::string_view s, uint64_t* value, bool* huge) {
  if (s.empty()) return false;
  uint64_t v = 0;
  *huge = false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (v > (UINT64_MAX - 9) / 10) *huge = true;
    if (!*huge) v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *value = v;
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const std::string* HttpRequest::Header(absl::string_view name) const {
  for (const HttpHeader& h : headers) {
    if (absl::EqualsIgnoreCase(h.name, name)) return &h.value;
  }
  return nullptr;
}

HttpRequestParser::HttpRequestParser(size_t max_header_bytes, size_t max_body_bytes)
    : max_header_bytes_(max_header_bytes), max_body_bytes_(max_body_bytes) {}

void HttpRequestParser::Reset() {
  state_ = State::kHead;
  scan_from_ = 0;
  request_ = HttpRequest();
  keep_alive_ = true;
  expects_continue_ = false;
  remaining_ = 0;
  trailer_bytes_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

HttpRequestParser::Progress HttpRequestParser::Fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return Progress::kError;
}

bool HttpRequestParser::Reject(int status, std::string message) {
  Fail(status, std::move(message));
  return false;
}

HttpRequestParser::Progress HttpRequestParser::Parse(absl::string_view in, size_t* consumed) {
  *consumed = 0;
  switch (state_) {
    case State::kHead:
      return ParseHead(in, consumed);
    case State::kDone:
      return Progress::kComplete;
    case State::kError:
      return Progress::kError;
    default:
      return ParseBody(in, consumed);
  }
}

HttpRequestParser::Progress HttpRequestParser::ParseHead(absl::string_view in, size_t* consumed) {
  // Empty lines before a request line are ignored (RFC 9112 2.2).
  size_t skip = 0;
  while (skip < in.size() && (in[skip] == '\r' || in[skip] == '\n')) ++skip;
  if (skip > 0) scan_from_ = 0;
  *consumed = skip;
  in.remove_prefix(skip);
  const size_t end = FindHeadEnd(in, scan_from_);
  if (end == absl::string_view::npos) {
    if (in.size() > max_header_bytes_) return Fail(431, "request header fields too large");
    scan_from_ = in.size() >= 2 ? in.size() - 2 : 0;
    return Progress::kNeedMore;
  }
  if (end > max_header_bytes_) return Fail(431, "request header fields too large");
  std::vector<absl::string_view> lines = absl::StrSplit(in.substr(0, end), '\n');
  // The head ends with "\n" + blank line: the split's last two are empty.
  lines.resize(lines.size() - 2);
  if (!ParseRequestLine(StripEol(lines[0]))) return Progress::kError;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (!ParseHeaderLine(StripEol(lines[i]))) return Progress::kError;
  }
  if (!ApplyFraming()) return Progress::kError;
  *consumed += end;
  scan_from_ = 0;
  return state_ == State::kDone ? Progress::kComplete : Progress::kHeadDone;
}

bool HttpRequestParser::ParseRequestLine(absl::string_view line) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) return Reject(400, "malformed request line");
  if (!IsToken(parts[0])) return Reject(400, "malformed method");
  const absl::string_view target = parts[1];
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
      })) {
    return Reject(400, "malformed request target");
  }
  const absl::string_view version = parts[2];
  if (version.size() != 8 || !absl::StartsWith(version, "HTTP/") || !absl::ascii_isdigit(version[5]) ||
      version[6] != '.' || !absl::ascii_isdigit(version[7])) {
    return Reject(400, "malformed HTTP version");
  }
  if (version[5] != '1') return Reject(505, "HTTP version not supported");
  request_.http_minor = version[7] - '0';
  request_.method = std::string(parts[0]);
  request_.target = std::string(target);
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  request_.query = q == absl::string_view::npos ? "" : std::string(target.substr(q + 1));
  return true;
}

bool HttpRequestParser::ParseHeaderLine(absl::string_view line) {
  if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
    return Reject(400, "obsolete line folding in headers");
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return Reject(400, "header line without a colon");
  const absl::string_view name = line.substr(0, colon);
  if (!IsToken(name)) return Reject(400, "malformed header name");
  const absl::string_view value = TrimOws(line.substr(colon + 1));
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return Reject(400, "control character in a header value");
  }
  request_.headers.push_back(HttpHeader{std::string(name), std::string(value)});
  return true;
}

// Content-Length / Transfer-Encoding, Connection and Expect, once every header
// is in.
bool HttpRequestParser::ApplyFraming() {
  bool has_length = false, chunked = false, has_te = false, close = false, keep = false;
  uint64_t length = 0;
  for (const HttpHeader& h : request_.headers) {
    if (absl::EqualsIgnoreCase(h.name, "content-length")) {
      uint64_t v = 0;
      bool huge = false;
      if (!ParseContentLength(h.value, &v, &huge)) return Reject(400, "malformed Content-Length");
      if (huge || v > max_body_bytes_) return Reject(413, "request body too large");
      if (has_length && v != length) return Reject(400, "conflicting Content-Length headers");
      has_length = true;
      length = v;
    } else if (absl::EqualsIgnoreCase(h.name, "transfer-encoding")) {
      if (has_te || !absl::EqualsIgnoreCase(h.value, "chunked")) {
        return Reject(501, "transfer coding not implemented");
      }
      has_te = chunked = true;
    } else if (absl::EqualsIgnoreCase(h.name, "connection")) {
      for (absl::string_view token : absl::StrSplit(h.value, ',')) {
        token = TrimOws(token);
        if (absl::EqualsIgnoreCase(token, "close")) close = true;
        if (absl::EqualsIgnoreCase(token, "keep-alive")) keep = true;
      }
    } else if (absl::EqualsIgnoreCase(h.name, "expect")) {
      expects_continue_ = absl::EqualsIgnoreCase(h.value, "100-continue");
    }
  }
  if (has_length && has_te) return Reject(400, "both Content-Length and Transfer-Encoding");
  keep_alive_ = request_.http_minor >= 1 ? !close : (keep && !close);
  if (request_.http_minor < 1) expects_continue_ = false;
  if (chunked) {
    state_ = State::kChunkSize;
  } else if (length > 0) {
    state_ = State::kLengthBody;
    remaining_ = length;
    // Not all of it up front: a client may declare 8 MiB and send nothing.
    request_.body.reserve(static_cast<size_t>(std::min<uint64_t>(length, 64 << 10)));
  } else {
    state_ = State::kDone;
    expects_continue_ = false;
  }
  return true;
}

HttpRequestParser::Progress HttpRequestParser::ParseBody(absl::string_view in, size_t* consumed) {
  size_t used = 0;
  while (true) {
    const absl::string_view rest = in.substr(used);
    size_t n = 0;
    Progress p = Progress::kNeedMore;
    switch (state_) {
      case State::kLengthBody:
      case State::kChunkData:
        n = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        request_.body.append(rest.data(), n);
        remaining_ -= n;
        if (remaining_ == 0) state_ = state_ == State::kLengthBody ? State::kDone : State::kChunkDataEnd;
        break;
      case State::kChunkDataEnd:
        if (absl::StartsWith(rest, "\n")) {
          n = 1;
        } else if (absl::StartsWith(rest, "\r\n")) {
          n = 2;
        } else if (rest.size() >= 2 || (rest.size() == 1 && rest[0] != '\r')) {
          return Fail(400, "malformed chunk: no CRLF after its data");
        }
        if (n > 0) state_ = State::kChunkSize;
        break;
      case State::kChunkSize:
        p = ParseChunkSize(rest, &n);
        break;
      case State::kTrailers:
        p = ParseTrailers(rest, &n);
        break;
      default:
        break;
    }
    used += n;
    *consumed = used;
    if (p == Progress::kError) return p;
    if (state_ == State::kDone) return Progress::kComplete;
    if (n == 0) return Progress::kNeedMore;
  }
}

HttpRequestParser::Progress HttpRequestParser::ParseChunkSize(absl::string_view in, size_t* consumed) {
  const size_t eol = in.find('\n');
  if (eol == absl::string_view::npos) {
    if (in.size() > kMaxChunkLineBytes) return Fail(400, "chunk size line too long");
    return Progress::kNeedMore;
  }
  if (eol + 1 > kMaxChunkLineBytes) return Fail(400, "chunk size line too long");
  const absl::string_view line = StripEol(in.substr(0, eol + 1));
  uint64_t size = 0;
  size_t digits = 0;
  for (; digits < line.size() && HexValue(line[digits]) >= 0; ++digits) {
    if (digits >= 15) return Fail(413, "request body too large");
    size = size * 16 + static_cast<uint64_t>(HexValue(line[digits]));
  }
  const absl::string_view ext = TrimOws(line.substr(digits));
  if (digits == 0 || (!ext.empty() && ext[0] != ';')) return Fail(400, "malformed chunk size");
  if (size > max_body_bytes_ - std::min(max_body_bytes_, request_.body.size())) {
    return Fail(413, "request body too large");
  }
  *consumed = eol + 1;
  remaining_ = size;
  state_ = size == 0 ? State::kTrailers : State::kChunkData;
  return Progress::kNeedMore;
}

// The trailer section after the zero chunk: lines up to a blank one, checked
// for size and ignored.
HttpRequestParser::Progress HttpRequestParser::ParseTrailers(absl::string_view in, size_t* consumed) {
  const size_t eol = in.find('\n');
  if (eol == absl::string_view::npos) {
    if (trailer_bytes_ + in.size() > max_header_bytes_) return Fail(431, "request trailer fields too large");
    return Progress::kNeedMore;
  }
  trailer_bytes_ += eol + 1;
  if (trailer_bytes_ > max_header_bytes_) return Fail(431, "request trailer fields too large");
  const absl::string_view line = StripEol(in.substr(0, eol + 1));
  *consumed = eol + 1;
  if (line.empty()) {
    state_ = State::kDone;
  } else if (line.find(':') == absl::string_view::npos || line[0] == ' ' || line[0] == '\t') {
    return Fail(400, "malformed trailer line");
  }
  return Progress::kNeedMore;
}

absl::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string HttpResponseHead(int status, absl::string_view content_type, int64_t content_length, bool chunked,
                             bool keep_alive, const std::vector<HttpHeader>& extra_headers) {
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ", HttpReasonPhrase(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&head, "Content-Type: ", content_type, "\r\n");
  if (content_length >= 0) {
    absl::StrAppend(&head, "Content-Length: ", content_length, "\r\n");
  } else if (chunked) {
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
  }
  absl::StrAppend(&head, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n");
  for (const HttpHeader& h : extra_headers) {
    if (absl::EqualsIgnoreCase(h.name, "connection") || absl::EqualsIgnoreCase(h.name, "content-length") ||
        absl::EqualsIgnoreCase(h.name, "transfer-encoding")) {
      continue;  // the framing is the server's
    }
    absl::StrAppend(&head, h.name, ": ", h.value, "\r\n");
  }
  head += "\r\n";
  return head;
}

std::string HttpErrorResponse(int status, absl::string_view content_type, absl::string_view body) {
  return absl::StrCat(HttpResponseHead(status, content_type, static_cast<int64_t>(body.size()), false, false, {}),
                      body);
}

}  // namespace pdserve
