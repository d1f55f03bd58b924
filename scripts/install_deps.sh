#!/usr/bin/env bash
# Installs what building and testing dsinfer needs on a fresh Debian 12 machine:
# Debian packages for the build, PyPI packages for the test tooling. Installs
# only what is missing, so a second run is quick. With --no-reference it skips
# llama-cpp-python (the reference implementation, compiled from source by pip).
set -euo pipefail
with_reference=1
[ "${1:-}" = "--no-reference" ] && with_reference=0

debian_packages=(cmake ninja-build g++ ccache pkg-config libgtest-dev libpcre2-dev nlohmann-json3-dev libboost1.81-dev
                 clang libclang-rt-14-dev python3-pip time)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python_packages=(gguf numpy)
[ "$with_reference" = 1 ] && python_packages+=(pytest jinja2 openai schemathesis llama-cpp-python)
need_pip=()
for p in "${python_packages[@]}"; do
  python3 -m pip show "$p" >/dev/null 2>&1 || need_pip+=("$p")
done
if [ ${#need_pip[@]} -gt 0 ]; then
  # llama-cpp-python compiles llama.cpp (several minutes on two cores, once; pip caches the wheel).
  echo "installing PyPI packages: ${need_pip[*]}"
  python3 -m pip install -q "${need_pip[@]}"
fi
