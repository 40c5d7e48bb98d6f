# cpp-httplib from Debian (libcpp-httplib-dev): a header plus libcpp-httplib.so.
# Its pkg-config file carries the OpenSSL/zlib/Brotli defines the library was
# built with; the header's class layouts depend on them, so they must match.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::CPP_HTTPLIB)
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
endif()
target_link_libraries(${module} PUBLIC PkgConfig::CPP_HTTPLIB)
