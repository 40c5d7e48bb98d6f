#!/usr/bin/env bash
# Runs the whole CTest suite and says plainly when GPU tests were skipped.
set -uo pipefail
build_dir=${1:-build}
cd "$build_dir" || exit 1
ctest --output-on-failure -j "$(nproc)" --timeout 1800
rc=$?
backend=$(./vpod info 2>/dev/null | sed -n 's/^backend: //p')
case "$backend" in
  CUDA*) echo "GPU tests ran: $backend" ;;
  *) echo "GPU tests (label gpu) were skipped: ${backend:-vpod info failed}" ;;
esac
exit $rc
