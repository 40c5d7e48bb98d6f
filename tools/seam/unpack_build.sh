# Sourced by the GPU machine's scripts (tools/seam/gpu_check.sh,
# grammar_check.sh, tools/prefix/gpu_check.sh): unpacks what pack_build.sh
# packed at /work/main/build, the absolute path CTest's files name (with
# /work/main linked to this checkout when it lives elsewhere), then sets
# `build`, `vpod` and VPOD_FIXTURES (the carried fixtures). REUNPACK=0 keeps a
# build already unpacked there.
#   source tools/seam/unpack_build.sh ARCHIVE REPO
unpack_archive=$(realpath "$1")
unpack_repo=$2
if [[ ! -x /work/main/build/vpod || "${REUNPACK:-1}" == 1 ]]; then
  rm -rf "$unpack_repo/build" && tar -xzf "$unpack_archive" -C "$unpack_repo" || exit 1
  if [[ "$unpack_repo" != /work/main ]]; then
    mkdir -p /work/main && rm -rf /work/main/build && ln -sfn "$unpack_repo/build" /work/main/build
  fi
fi
build=/work/main/build
vpod=$build/vpod
export VPOD_FIXTURES=${VPOD_FIXTURES:-$unpack_repo/.carry/fixtures}
