#!/usr/bin/env bash
# Side-by-side CPU speed: our `llmrt bench` against llama.cpp on the same GGUF, same threads.
#
#   tests/bench/compare_llamacpp.sh [--threads 2] [--with-1b] [--pp 512] [--tg 128] [-r 3]
#                                   [--build build] [--workdir DIR] [--json-out FILE]
#
# llama.cpp comes from the PyPI package llama-cpp-python (pinned below), built from source by pip
# into a scratch virtual environment (default $XDG_CACHE_HOME/llmc/llamacpp-venv-<version>, reused
# when it exists; never vendored or committed) with the CPU ISA flags set explicitly and AMX off
# (AMX faults on these machines). LLAMA_PY=/path/to/python skips the install and uses a Python
# that already has llama_cpp and gguf. LLAMA_VENV=DIR puts the scratch environment elsewhere.
# Everything else (plans, the random 1B GGUF, results) goes to --workdir (default
# /tmp/llmc-compare-llamacpp); see compare_llamacpp.py for what is measured and how.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
GGUF_VERSION=0.19.0
NUMPY_SPEC="numpy>=1.26,<3"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "compare_llamacpp.sh: error: $*" >&2; exit 1; }

# ggml's CPU flags, chosen from what this CPU reports (no -march=native: the build says what it
# uses). AMX is always off.
ggml_cpu_flags() {
  local flags
  flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
  has() { [[ " $flags " == *" $1 "* ]]; }
  local args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  local f
  for f in avx avx2 fma f16c bmi2; do
    local name="${f^^}"
    if has "$f"; then args+=" -DGGML_$name=ON"; else args+=" -DGGML_$name=OFF"; fi
  done
  if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
    args+=" -DGGML_AVX512=ON"
    has avx512_vnni && args+=" -DGGML_AVX512_VNNI=ON" || args+=" -DGGML_AVX512_VNNI=OFF"
    has avx512_bf16 && args+=" -DGGML_AVX512_BF16=ON" || args+=" -DGGML_AVX512_BF16=OFF"
    has avx512vbmi && args+=" -DGGML_AVX512_VBMI=ON" || args+=" -DGGML_AVX512_VBMI=OFF"
  else
    args+=" -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF"
  fi
  has avx_vnni && args+=" -DGGML_AVX_VNNI=ON" || args+=" -DGGML_AVX_VNNI=OFF"
  # No GPU backends, no server/examples: only the library the Python package loads.
  args+=" -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF"
  echo "$args"
}

python_ok() {
  "$1" - <<EOF >/dev/null 2>&1
import llama_cpp, gguf, numpy
assert llama_cpp.__version__ == "$LLAMA_CPP_PYTHON_VERSION", llama_cpp.__version__
EOF
}

if [[ -n "${LLAMA_PY:-}" ]]; then
  [[ -x "$LLAMA_PY" ]] || die "LLAMA_PY=$LLAMA_PY is not an executable"
  "$LLAMA_PY" -c 'import llama_cpp, gguf, numpy' 2>/dev/null ||
    die "LLAMA_PY=$LLAMA_PY cannot import llama_cpp, gguf and numpy"
  py="$LLAMA_PY"
else
  venv="${LLAMA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/llmc/llamacpp-venv-$LLAMA_CPP_PYTHON_VERSION}"
  if [[ -x "$venv/bin/python" ]] && python_ok "$venv/bin/python"; then
    echo "compare_llamacpp.sh: reusing $venv" >&2
  else
    base_py="$(command -v python3 || true)"
    [[ -n "$base_py" ]] || die "python3 is needed to create $venv"
    command -v cmake >/dev/null || die "cmake is needed to build llama-cpp-python"
    cmake_args="$(ggml_cpu_flags)"
    echo "compare_llamacpp.sh: installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION into $venv" >&2
    echo "  CMAKE_ARGS=$cmake_args" >&2
    echo "  (built from source; several minutes on 2 cores)" >&2
    rm -rf "$venv"
    "$base_py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "gguf==$GGUF_VERSION" "$NUMPY_SPEC"
    # --no-binary and --no-cache-dir: a wheel built earlier with other flags is never reused.
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      "$venv/bin/python" -m pip install --no-cache-dir --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" ||
      { rm -rf "$venv"; die "pip could not build llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"; }
    python_ok "$venv/bin/python" || { rm -rf "$venv"; die "the new environment $venv does not import llama_cpp"; }
  fi
  py="$venv/bin/python"
fi

exec "$py" "$here/compare_llamacpp.py" all "$@"
