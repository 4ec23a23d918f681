#!/usr/bin/env bash
# Runs every test: unit (GoogleTest), IR (lit), end-to-end against committed reference
# fixtures (transformers, llama.cpp), bad-input tests, and the libFuzzer targets for a fixed
# time each. Sets up what it needs first (tools/setup.sh --no-run).
#
#   tools/test.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${LLMC_BUILD_DIR:-$ROOT/build}
CACHE=${LLMC_CACHE:-$ROOT/.cache}
JOBS=${JOBS:-$(nproc)}

"$ROOT/tools/setup.sh" --no-run

# Test-side Python (numpy + pytest for the end-to-end suite); never a runtime dependency.
VENV=$CACHE/test-venv
if [ ! -x "$VENV/bin/pytest" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet numpy==2.2.6 pytest==8.4.2
fi
"$VENV/bin/python" -c "import openai" 2>/dev/null || "$VENV/bin/pip" install --quiet openai==3.57.0  # tests/server

# Sanitizer build (clang, ASan + UBSan, coverage for libFuzzer) of everything that reads
# untrusted bytes or runs kernels: the runtime, the frontends and tokenizers, their unit tests
# and the libFuzzer targets. (The MLIR compiler is not part of it.)
SAN_BUILD=$BUILD-sanitize
# Full compiler paths: with bare names CMake sees a "changed" compiler on every re-run and wipes
# the cache, losing the options below.
cmake -S "$ROOT" -B "$SAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH=/usr/lib/llvm-19 -DCMAKE_C_COMPILER="$(command -v clang-19)" -DCMAKE_CXX_COMPILER="$(command -v clang++-19)" \
  -DLLMC_BUILD_COMPILER=OFF -DLLMC_ENABLE_FUZZ=ON -DLLMC_ENABLE_UBSAN=ON >/dev/null
ninja -C "$SAN_BUILD" -j "$JOBS"

export LLMC_SMOLLM2_GGUF=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
export LLMC_BUILD_DIR=$BUILD
export LLMC_PYTHON=$VENV/bin/python
status=0
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" "$@" || status=1
# Under the sanitizers: the unit, frontend and tokenizer tests, then each fuzz target for a fixed
# time (LLMC_FUZZ_SECONDS, default 20) on its committed corpus.
ctest --test-dir "$SAN_BUILD" --output-on-failure -j "$JOBS" -LE fuzz "$@" || status=1
ctest --test-dir "$SAN_BUILD" --output-on-failure -L fuzz || status=1
exit $status
