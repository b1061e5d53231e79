#!/usr/bin/env bash
# Installs the Debian packages kevo builds against, skipping what is already present.
# Usage: cmake/install-deps.sh [--with-browser]   (needs root or passwordless sudo for missing packages)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build ccache pkg-config python3 clang libclang-rt-14-dev
  libeigen3-dev libboost-graph-dev libtbb-dev catch2 libcereal-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libcurl4-openssl-dev libopenblas-dev libbenchmark-dev libsqlite3-dev
  python3-dev pybind11-dev python3-pytest python3-numpy python3-matplotlib libxml2-utils
  libopenmpi-dev openmpi-bin
  libonnx-dev libprotobuf-dev python3-onnx python3-torch
  patchelf
)
if [[ "${1:-}" == "--with-browser" || "${KEVO_WITH_BROWSER:-0}" == "1" ]]; then
  pkgs+=(chromium)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "kevo: all build dependencies present"
  exit 0
fi

echo "kevo: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "kevo: error: missing packages (${missing[*]}) and not root; run as root or install them with apt-get" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/kevo-apt.log 2>&1; then
  echo "kevo: apt-get install failed, refreshing package lists and retrying" >&2
  if ! { $SUDO apt-get update >>/tmp/kevo-apt.log 2>&1 &&
         $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/kevo-apt.log 2>&1; }; then
    echo "kevo: error: could not install ${missing[*]} (log: /tmp/kevo-apt.log)" >&2
    tail -n 5 /tmp/kevo-apt.log >&2
    exit 1
  fi
fi
echo "kevo: dependencies installed"
