// Setting up HttpServer (http_listener.h): option checks, the TLS context, the
// listening socket.
#include "common/net/http_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve {
namespace http_internal {
namespace {

std::string OpenSslErrors() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

}  // namespace

absl::Status CheckHttpServerOptions(const HttpServerOptions& o, bool has_handler) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(o.name, ": invalid HTTP server options: ", what));
  };
  if (!has_handler) return bad("no handler");
  if (o.port < 0 || o.port > 65535) return bad(absl::StrCat("port ", o.port));
  if (o.max_connections < 1) return bad("max_connections < 1");
  if (o.worker_threads < 1) return bad("worker_threads < 1");
  if (o.fast_lane && o.fast_worker_threads < 1) return bad("fast_worker_threads < 1 with a fast lane");
  if (o.header_timeout <= absl::ZeroDuration() || o.body_timeout <= absl::ZeroDuration() ||
      o.idle_timeout <= absl::ZeroDuration() || o.write_timeout <= absl::ZeroDuration()) {
    return bad("a timeout <= 0");
  }
  if (o.max_header_bytes < 16) return bad("max_header_bytes < 16");
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) return bad("tls_cert_file and tls_key_file go together");
  return absl::OkStatus();
}

absl::StatusOr<SSL_CTX*> NewServerTlsContext(const HttpServerOptions& options) {
  if (options.tls_cert_file.empty()) return static_cast<SSL_CTX*>(nullptr);
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat(options.name, ": SSL_CTX_new: ", OpenSslErrors()));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  // Partial writes: ConnWriter::WriteAll and TryWriteNow take what a record
  // took. Released buffers: an idle connection holds no 34 KiB of them.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  auto bad = [&](absl::string_view what) {
    absl::Status s = absl::InvalidArgumentError(absl::StrCat(options.name, ": ", what, " (certificate ",
                                                             options.tls_cert_file, ", key ", options.tls_key_file,
                                                             "): ", OpenSslErrors()));
    SSL_CTX_free(ctx);
    return s;
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, options.tls_cert_file.c_str()) != 1) {
    return bad("cannot load the TLS certificate");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, options.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return bad("cannot load the TLS private key");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return bad("the TLS private key does not match the certificate");
  return ctx;
}

absl::StatusOr<int> BindListener(const HttpServerOptions& options, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  const int gai = getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), service.c_str(), &hints, &found);
  const std::string where = absl::StrCat(options.name, ": cannot listen on ", options.host, ":", options.port);
  if (gai != 0) return absl::UnavailableError(absl::StrCat(where, ": ", gai_strerror(gai)));
  int listen_fd = -1;
  int err = 0;
  for (addrinfo* ai = found; ai != nullptr && listen_fd < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd = fd;
    } else {
      err = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd < 0) return absl::UnavailableError(absl::StrCat(where, ": ", strerror(err)));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string ignored;
  PeerOf(addr, &ignored, port);
  return listen_fd;
}

void PeerOf(const sockaddr_storage& addr, std::string* address, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
    *port = ntohs(a->sin6_port);
  }
  *address = buf;
}

}  // namespace http_internal
}  // namespace pdserve
