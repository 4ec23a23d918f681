// cpp-httplib as Debian ships it: a compiled library (libcpp-httplib.so) built with TLS, zlib and
// brotli, whose class layouts depend on those defines (Request holds an SSL pointer only under
// CPPHTTPLIB_OPENSSL_SUPPORT). Every includer must see the library's defines; runtime/CMakeLists.txt
// passes its pkg-config flags, and these guards keep any other build consistent. Nothing in llmrt
// uses TLS or compression. Include this instead of <httplib.h>.
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
