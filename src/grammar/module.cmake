# grammar/: structured output through xgrammar's C++ core, built from its
# pinned PyPI sdist by cmake/xgrammar.cmake (never vendored).
include(${CMAKE_SOURCE_DIR}/cmake/xgrammar.cmake)
target_link_libraries(${module} PRIVATE xgrammar::xgrammar)
add_dependencies(${module} xgrammar_external)
