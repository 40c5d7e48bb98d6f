#!/usr/bin/env bash
# Installs the Debian packages vpod's build and tests need. Idempotent, and
# silent when everything is already present. The CUDA 13 toolkit itself is a
# prerequisite of the machine (see README.md), not installed here.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang-format
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libboost1.81-dev zlib1g-dev libcpp-httplib-dev libpcre2-dev libutf8proc-dev libsimdjson-dev
  libgtest-dev libbenchmark-dev
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages used only by tests and tools (never on the serving path).
requirements=tools/requirements-test.txt
if [[ -f $requirements ]] && command -v python3 >/dev/null 2>&1; then
  if ! python3 - "$requirements" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, wanted = line.partition("==")
    name = name.split("[")[0]  # extras: lm-eval[api]
    try:
        if wanted and version(name) != wanted:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
    echo "install-deps: installing Python test packages from $requirements"
    python3 -m pip install -q --disable-pip-version-check -r "$requirements"
  fi
fi

# LiteLLM in a virtual env of its own (tools/requirements-litellm.txt says
# why), seeing the system packages but never changing them (pip may warn
# there that awscli's pins are not met: it means the system's awscli, which
# keeps its own botocore). Made or remade only when it is missing or holds
# another version than the pin; the cache is cmake/flashinfer.cmake's
# default, where the e2e tests look (tests/e2e/conftest.py).
litellm_requirements=tools/requirements-litellm.txt
if [[ -f $litellm_requirements ]] && command -v python3 >/dev/null 2>&1; then
  litellm_pin=$(sed -n 's/^litellm==\([^ #]*\).*/\1/p' "$litellm_requirements")
  litellm_cache=${XDG_CACHE_HOME:-$HOME/.cache}/vpod
  litellm_venv="${VPOD_DEPS_CACHE:-$litellm_cache}/venv-litellm"
  litellm_have=""
  if [[ -x $litellm_venv/bin/python ]]; then
    litellm_have=$("$litellm_venv/bin/python" -c \
      'from importlib.metadata import version; print(version("litellm"))' 2>/dev/null || true)
  fi
  if [[ -n $litellm_pin && $litellm_have != "$litellm_pin" ]]; then
    echo "install-deps: installing litellm==$litellm_pin into $litellm_venv"
    # Test-only: a failure here warns and leaves the build to go on.
    if ! { [[ -x $litellm_venv/bin/python ]] ||
      python3 -m venv --system-site-packages "$litellm_venv"; } ||
      ! "$litellm_venv/bin/python" -m pip install -q --disable-pip-version-check \
        -r "$litellm_requirements"; then
      echo "install-deps: warning: LiteLLM could not be installed into $litellm_venv;" \
        "the e2e tests that call it will fail (or skip, without the env)" >&2
    fi
  fi
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install-deps: the CUDA 13 toolkit (nvcc) is required; install it from NVIDIA" >&2
  exit 1
fi
