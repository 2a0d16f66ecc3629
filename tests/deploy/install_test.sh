#!/usr/bin/env bash
# `cmake --install` into a throwaway prefix, then used from outside the tree as a user would: the installed CLI
# reports the build's version, and a program built against the CMake package (find_package(myriad),
# tests/deploy/consumer) writes the same random model, byte for byte, as the installed `myriad init`.
#   install_test.sh BUILD_DIR SOURCE_DIR SCRATCH
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" && scratch=$(realpath "$scratch")
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
for f in bin/myriad lib/libmyriad_core.a lib/libmyriad_serve.a include/myriad/model/init.h \
         lib/cmake/myriad/myriadConfig.cmake lib/cmake/myriad/myriadTargets.cmake share/myriad/configs/tiny.json; do
  [[ -e "$prefix/$f" ]] || { echo "FAIL: the install has no $f"; exit 1; }
done
built_version=$("$build/myriad" version --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
installed_version=$("$prefix/bin/myriad" version --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
[[ "$built_version" == "$installed_version" ]] || { echo "FAIL: installed version $installed_version, built $built_version"; exit 1; }
echo "installed myriad $installed_version under $prefix"

# The consumer: configured with only the prefix on CMAKE_PREFIX_PATH (no path into the source tree).
cmake -S "$src/tests/deploy/consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      >"$scratch/consumer-configure.log" 2>&1 || { cat "$scratch/consumer-configure.log"; exit 1; }
if grep -rq -- "$src/src" "$scratch/consumer/CMakeCache.txt" "$scratch/consumer/CMakeFiles" 2>/dev/null; then
  echo "FAIL: the consumer's build points into the source tree"; exit 1
fi
cmake --build "$scratch/consumer" -j 2 >"$scratch/consumer-build.log" 2>&1 || { cat "$scratch/consumer-build.log"; exit 1; }
config=$prefix/share/myriad/configs/tiny.json
"$scratch/consumer/consumer" "$config" "$scratch/from-library" 7 >/dev/null
"$prefix/bin/myriad" init --config "$config" --out "$scratch/from-cli" --seed 7 >/dev/null
cmp "$scratch/from-library/model.safetensors" "$scratch/from-cli/model.safetensors"
cmp "$scratch/from-library/config.json" "$scratch/from-cli/config.json"
echo "PASS: find_package(myriad) builds a program whose model equals the installed CLI's, byte for byte"
