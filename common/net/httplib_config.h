// The one way to include cpp-httplib. Debian's libcpp-httplib-dev is the
// compiled ("split") build: httplib.h only declares, libcpp-httplib.so
// defines. The library was built with these three options (`pkg-config
// --cflags cpp-httplib`), and they change the layout of httplib::Request
// (and declare httplib::SSLServer), so every file that includes httplib.h
// must define them the same way: include this header instead.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
