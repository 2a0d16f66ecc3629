#!/usr/bin/env bash
# Installs the Debian packages myriad needs, skipping those already present (idempotent, quiet).
#   scripts/deps.sh build   : compiler, CMake, OpenBLAS and oneDNN (GEMM), nlohmann-json, SentencePiece, cpp-httplib, jemalloc, GoogleTest,
#                             OpenMPI, xxHash, PCRE2, ICU, libjpeg-turbo, libpng,
#                             giflib, libwebp (image decoding), stb (resizing), pybind11 (the Python module)
#   scripts/deps.sh fuzz    : the build set plus clang 14 with its sanitizer and libFuzzer runtime and OpenMP
#   scripts/deps.sh test    : the build and fuzz sets plus the Python side of the interop/reference tests
#                             (Debian's python3-torch and python3-pil, and PyPI's safetensors, openai client, tiktoken and tokenizers
#                             in a venv under build/pyenv)
set -euo pipefail
what="${1:-build}"
pkgs=(build-essential cmake pkg-config python3 libopenblas-dev libdnnl-dev nlohmann-json3-dev libgtest-dev libgmock-dev
      libsentencepiece-dev libcpp-httplib-dev libjemalloc-dev libopenmpi-dev openmpi-bin libxxhash-dev libpcre2-dev libicu-dev
      libstb-dev libturbojpeg0-dev libpng-dev libgif-dev libwebp-dev zlib1g-dev
      python3-dev pybind11-dev)
if [[ "$what" == fuzz || "$what" == test ]]; then
  pkgs+=(clang-14 libclang-rt-14-dev libomp-14-dev)
fi
if [[ "$what" == test ]]; then
  pkgs+=(python3 python3-venv python3-setuptools python3-wheel python3-numpy python3-torch python3-pytest python3-pil)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ "$what" == test ]]; then
  venv=build/pyenv
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import safetensors, torch, openai, tiktoken, tokenizers, gguf" 2>/dev/null; then
    echo "deps: creating $venv (system torch + PyPI safetensors, openai, tiktoken, tokenizers, gguf)"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check safetensors openai tiktoken tokenizers gguf
  fi
fi
