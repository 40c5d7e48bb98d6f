# Boost.Beast and Asio (Debian's libboost1.81-dev; header-only) carry the
# HTTP server; zlib gzips responses.
find_package(Boost 1.81 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
target_link_libraries(${module} PUBLIC Boost::headers PRIVATE ZLIB::ZLIB Threads::Threads)
# One Asio configuration for every translation unit that includes it.
target_compile_definitions(${module} PUBLIC BOOST_ASIO_NO_DEPRECATED)
# GCC's -Wmaybe-uninitialized misfires inside Beast's parser (boost::optional
# in basic_parser::do_field) under sanitizer builds: a known false positive.
target_compile_options(${module} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
