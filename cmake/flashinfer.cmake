# FlashInfer's attention kernels for the paged baseline (`--kv-cache paged`),
# compiled from the C++ headers of the flashinfer-python wheel pinned below.
# The wheel is fetched from PyPI at configure time, checked against its SHA256,
# kept in a cache outside the source tree (VPOD_DEPS_CACHE) and unpacked under
# the build folder; nothing of it enters the repository.
#
# Sets VPOD_FLASHINFER_INCLUDE_DIRS (FlashInfer, its CUTLASS/CuTe, its CCCL).

set(VPOD_FLASHINFER_VERSION 0.7.2.post1)
set(VPOD_FLASHINFER_WHEEL flashinfer_python-${VPOD_FLASHINFER_VERSION}-py3-none-any.whl)
set(VPOD_FLASHINFER_URL
  "https://files.pythonhosted.org/packages/b6/ad/da1fc7644b28ab82db922021955a0c85c8d6b3b1d6db224a13ef65cef85e/${VPOD_FLASHINFER_WHEEL}")
set(VPOD_FLASHINFER_SHA256 bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49)

if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
  set(vpod_default_cache "$ENV{XDG_CACHE_HOME}/vpod")
elseif(DEFINED ENV{HOME} AND NOT "$ENV{HOME}" STREQUAL "")
  set(vpod_default_cache "$ENV{HOME}/.cache/vpod")
else()
  set(vpod_default_cache "${CMAKE_BINARY_DIR}/_deps/cache")
endif()
set(VPOD_DEPS_CACHE "${vpod_default_cache}" CACHE PATH
  "Where fetched third-party archives (the FlashInfer wheel) are kept between builds")

set(vpod_fi_wheel "${VPOD_DEPS_CACHE}/${VPOD_FLASHINFER_WHEEL}")
set(vpod_fi_root "${CMAKE_BINARY_DIR}/_deps/flashinfer-${VPOD_FLASHINFER_VERSION}")
set(vpod_fi_data "${vpod_fi_root}/flashinfer/data")

# The stamp names what was unpacked: a new list of directories unpacks again.
set(vpod_fi_stamp "${vpod_fi_root}/.vpod-unpacked-2")
if(NOT EXISTS "${vpod_fi_stamp}")
  if(EXISTS "${vpod_fi_wheel}")
    file(SHA256 "${vpod_fi_wheel}" vpod_fi_have)
    if(NOT vpod_fi_have STREQUAL VPOD_FLASHINFER_SHA256)
      file(REMOVE "${vpod_fi_wheel}")
    endif()
  endif()
  if(NOT EXISTS "${vpod_fi_wheel}")
    message(STATUS "Fetching ${VPOD_FLASHINFER_WHEEL} from PyPI")
    file(MAKE_DIRECTORY "${VPOD_DEPS_CACHE}")
    # Download beside the final name, so an interrupted fetch never looks complete.
    file(DOWNLOAD "${VPOD_FLASHINFER_URL}" "${vpod_fi_wheel}.part"
      EXPECTED_HASH SHA256=${VPOD_FLASHINFER_SHA256} TLS_VERIFY ON STATUS vpod_fi_status)
    list(GET vpod_fi_status 0 vpod_fi_code)
    if(NOT vpod_fi_code EQUAL 0)
      file(REMOVE "${vpod_fi_wheel}.part")
      message(FATAL_ERROR "Could not fetch ${VPOD_FLASHINFER_URL}: ${vpod_fi_status}. "
        "Put the wheel (SHA256 ${VPOD_FLASHINFER_SHA256}) at ${vpod_fi_wheel} "
        "(e.g. pip download --no-deps flashinfer-python==${VPOD_FLASHINFER_VERSION}).")
    endif()
    file(RENAME "${vpod_fi_wheel}.part" "${vpod_fi_wheel}")
  endif()
  # Only the headers the kernels include (about 60 MB of the wheel's 426 MB).
  file(REMOVE_RECURSE "${vpod_fi_root}")
  file(ARCHIVE_EXTRACT INPUT "${vpod_fi_wheel}" DESTINATION "${vpod_fi_root}"
    PATTERNS flashinfer/data/include flashinfer/data/cutlass/include
             flashinfer/data/cutlass/tools/util/include flashinfer/data/cccl/cub/cub flashinfer/data/cccl/libcudacxx/include
             flashinfer/data/cccl/thrust/thrust)
  if(NOT EXISTS "${vpod_fi_data}/include/flashinfer/attention/prefill.cuh")
    message(FATAL_ERROR "${vpod_fi_wheel} did not unpack FlashInfer's headers")
  endif()
  file(TOUCH "${vpod_fi_stamp}")
endif()

# CCCL first (-I, as FlashInfer's JIT does: its vendored CCCL must win over the
# toolkit's), then FlashInfer and CUTLASS as system headers (their warnings
# are not ours).
set(VPOD_FLASHINFER_CCCL_DIRS
  "${vpod_fi_data}/cccl/cub" "${vpod_fi_data}/cccl/libcudacxx/include" "${vpod_fi_data}/cccl/thrust")
set(VPOD_FLASHINFER_INCLUDE_DIRS "${vpod_fi_data}/include" "${vpod_fi_data}/cutlass/include"
  "${vpod_fi_data}/cutlass/tools/util/include")
