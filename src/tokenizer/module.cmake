# tokenizer/: tokenizer.json is read with simdjson, pre-tokenizer regexes run
# on PCRE2 (UTF, UCP, JIT), Unicode normalization comes from utf8proc.
find_package(simdjson REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
target_link_libraries(${module} PRIVATE simdjson::simdjson PkgConfig::PCRE2 PkgConfig::UTF8PROC)
# Tests find the shared fixtures and their data. The fixtures: $VPOD_FIXTURES,
# else beside the clone (../shared/fixtures), else the workplace's
# /work/shared/fixtures (as model::find_fixtures_dir looks).
set(VPOD_FIXTURES_DIR "${CMAKE_SOURCE_DIR}/../shared/fixtures")
foreach(candidate "$ENV{VPOD_FIXTURES}" "${CMAKE_SOURCE_DIR}/../shared/fixtures"
                  "/work/shared/fixtures")
  if(candidate AND IS_DIRECTORY "${candidate}/tokenizers")
    set(VPOD_FIXTURES_DIR "${candidate}")
    break()
  endif()
endforeach()
message(STATUS "vpod: tokenizer fixtures at ${VPOD_FIXTURES_DIR}")
target_compile_definitions(${module} INTERFACE
  VPOD_FIXTURES_DIR="${VPOD_FIXTURES_DIR}"
  VPOD_TOKENIZER_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/tokenizer/data")
# `vpod tokenize` against Hugging Face tokenizers, live: fixtures, tokenizers
# trained on the spot and every feature variant. Exit 77 (skipped) when the
# Python package is missing; CI installs tools/requirements-test.txt.
add_test(NAME tokenizer.live_vs_hf_tokenizers
  COMMAND python3 ${CMAKE_SOURCE_DIR}/tools/tokenizer/compare_live.py --vpod $<TARGET_FILE:vpod>
          --fixtures ${VPOD_FIXTURES_DIR}/tokenizers)
set_tests_properties(tokenizer.live_vs_hf_tokenizers PROPERTIES
  LABELS tokenizer SKIP_RETURN_CODE 77 TIMEOUT 900)
