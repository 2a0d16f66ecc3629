#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (setup.py builds the module with the project's CMake, here in
# the already configured BUILD_DIR so that nothing is rebuilt), then `import myriad` from elsewhere with no
# PYTHONPATH: the module comes from the venv's site-packages and reports the version the CLI reports.
#   pip_install_test.sh BUILD_DIR SOURCE_DIR SCRATCH
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" && scratch=$(realpath "$scratch")
# Debian's setuptools and wheel (scripts/deps.sh test), seen through --system-site-packages: no download.
/usr/bin/python3 -m venv --system-site-packages "$scratch/venv"
MYRIAD_CMAKE_BUILD_DIR=$build MYRIAD_JOBS=2 "$scratch/venv/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation --no-deps --no-index "$src" >"$scratch/pip.log" 2>&1 || { cat "$scratch/pip.log"; exit 1; }
cd "$scratch"
found=$(env -u PYTHONPATH "$scratch/venv/bin/python" -c 'import myriad; print(myriad.__file__); print(myriad.__version__)')
file=$(sed -n 1p <<<"$found") version=$(sed -n 2p <<<"$found")
[[ "$file" == "$scratch/venv/"*site-packages/* ]] || { echo "FAIL: import myriad found $file, not the venv's"; exit 1; }
cli_version=$("$build/myriad" version --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
[[ "$version" == "$cli_version" ]] || { echo "FAIL: the module says $version, the CLI $cli_version"; exit 1; }
pip_version=$("$scratch/venv/bin/pip" show myriad | sed -n 's/^Version: //p')
echo "PASS: pip installed myriad $pip_version; import myriad -> $file ($version)"
