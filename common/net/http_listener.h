// Setting up HttpServer (http_server.h) before its threads start: the checks
// of its options, its TLS context and its listening socket. Internal to the
// server (http_server.cc); other code uses http_server.h.
//
// Contents:
//   CheckHttpServerOptions - InvalidArgument on options the server refuses.
//   NewServerTlsContext    - the SSL_CTX of an HTTPS server (TLS 1.2+, no
//                            renegotiation, partial writes, released buffers).
//   BindListener           - a non-blocking listening socket on host:port.
//   PeerOf                 - the numeric address and port of a sockaddr.
#pragma once

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/net/http_server.h"

namespace pdserve {
namespace http_internal {

// has_handler: the handler given to Start is not null.
absl::Status CheckHttpServerOptions(const HttpServerOptions& options, bool has_handler);

// Null (and OK) when the options name no TLS files; InvalidArgument when the
// files cannot be loaded or do not match, naming them and OpenSSL's errors.
absl::StatusOr<SSL_CTX*> NewServerTlsContext(const HttpServerOptions& options);

// The listening socket (SO_REUSEADDR, dual-stack on IPv6), non-blocking;
// *port: the port it got (options.port or, for 0, the one picked).
// Unavailable when no address of host:port can be bound.
absl::StatusOr<int> BindListener(const HttpServerOptions& options, int* port);

// "127.0.0.1" / "::1" (an IPv4-mapped IPv6 address as IPv4) and the port.
void PeerOf(const sockaddr_storage& addr, std::string* address, int* port);

}  // namespace http_internal
}  // namespace pdserve
