#!/usr/bin/env bash
# Packs what the GPU machine needs of a build into one archive that the device
# tool can carry (its tree limit is 64 MiB): the vpod binary, build/lib, the
# GPU test binaries and CTest's files. Unpack it at the same absolute path
# (tools/seam/gpu_check.sh does), since CTest's files name absolute paths.
#   tools/seam/pack_build.sh BUILD_DIR OUT.tar.gz
set -euo pipefail
build=$(cd "$1" && pwd)
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
cd "$build"
tar -czf "$out" --transform "s@^@$(basename "$build")/@" vpod lib \
  $(find . -name 'CTestTestfile.cmake' -o -name '*_include.cmake' -o -name '*_tests.cmake' \
      -o -name '*_labels.cmake' | sed 's@^\./@@') \
  $(ls tests/test_*_gpu | sed 's@^\./@@')
ls -la "$out"
