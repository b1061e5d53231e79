#!/bin/sh
# Builds kevo for a GPU machine that reaches no package registry (docs/GPU.md) and bundles it:
#   dist/device/bin/kevo   the kevo binary, RPATH $ORIGIN/../lib (patchelf)
#   dist/device/lib/       the shared libraries it needs from this Debian, except glibc's,
#                          libstdc++ and libgcc_s (the device's own, newer, are used)
# The bundle is built without MPI and without OpenBLAS (Eigen's own products suffice for the
# reference checks a GPU search does not use), so it stays small: pass dist/device in `carry`.
# Usage: scripts/device/bundle.sh [build dir (default build/device)]. Needs patchelf (apt).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$src/build/device"}
out="$src/dist/device"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DKEVO_WITH_MPI=OFF -DKEVO_OPENBLAS_LIBRARY=KEVO_OPENBLAS_LIBRARY-NOTFOUND -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON -DKEVO_BUILD_TESTS=OFF \
  -DKEVO_BUILD_BENCH=OFF -DKEVO_BUILD_EXAMPLES=OFF -DKEVO_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target kevo_cli
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/lib/cli/kevo" "$out/bin/kevo"
strip "$out/bin/kevo"
# every library ldd resolves, less the ones the device has (newer) itself
ldd "$out/bin/kevo" | awk '/=>/ {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
patchelf --set-rpath '$ORIGIN/../lib' "$out/bin/kevo"
for l in "$out"/lib/*; do patchelf --set-rpath '$ORIGIN' "$l"; done
# check: every library now resolves inside the bundle (or is one of the system's kept above)
if env -i PATH=/usr/bin:/bin ldd "$out/bin/kevo" | grep -q "not found"; then
  echo "bundle: unresolved libraries" >&2; exit 1
fi
"$out/bin/kevo" --version >/dev/null
du -sh "$out"
