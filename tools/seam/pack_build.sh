#!/usr/bin/env bash
# Packs what the GPU machine needs of a build into one archive that the device
# tool can carry (its tree limit is 64 MiB): the vpod binary, build/lib, the
# GPU test binaries and CTest's files. Unpack it at the same absolute path
# (tools/seam/gpu_check.sh does), since CTest's files name absolute paths.
#   tools/seam/pack_build.sh BUILD_DIR OUT.tar.gz
set -euo pipefail
build=$(cd "$1" && pwd)
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# The binaries carry the commit CMake last configured at (build_info.h); a
# commit re-runs that configure only at the next build, so a build packed right
# after committing would name the previous commit in every result it writes.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
built=$(sed -n 's/.*git_commit = "\(.*\)";/\1/p' "$build/generated/vpod/build_info.h" 2>/dev/null)
head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ "$built" != "$head" ]]; then
  echo "pack_build.sh: the build names commit '$built' but $src is at $head; build it first" >&2
  exit 1
fi
cd "$build"
tar -czf "$out" --transform "s@^@$(basename "$build")/@" vpod lib \
  $(find . -name 'CTestTestfile.cmake' -o -name '*_include.cmake' -o -name '*_tests.cmake' \
      -o -name '*_labels.cmake' | sed 's@^\./@@') \
  $(ls tests/test_*_gpu | sed 's@^\./@@')
ls -la "$out"
