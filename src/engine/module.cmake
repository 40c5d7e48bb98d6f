# Boost.Asio (header-only) carries the NCCL id exchange between nodes
# (nccl_id_exchange.cpp); the same Asio configuration as src/server.
find_package(Boost 1.81 REQUIRED)
target_link_libraries(${module} PRIVATE Boost::headers)
target_compile_definitions(${module} PUBLIC BOOST_ASIO_NO_DEPRECATED)
