#!/usr/bin/env bash
# Prepares what the GPU check (tools/gpu/run_checks.sh) needs on a machine with a GPU and no
# network or toolchain: a self-contained llmrt (its shared libraries beside it, glibc excepted)
# and small plans compiled here for sm_90 (H100/H200). Big models do not travel: the
# Llama-3-8B-shaped plans carry no weights (llmc --synthetic-weights), llmrt generates them at
# load. Writes gpu-bundle/ (git-ignored, well under the 64 MiB a device run may carry).
#
#   tools/gpu/make_bundle.sh [--target sm_90]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${LLMC_BUILD_DIR:-$ROOT/build}
TARGET=sm_90
[ "${1:-}" = "--target" ] && TARGET=$2
OUT=$ROOT/gpu-bundle
LLMC=$BUILD/tools/llmc
[ -x "$LLMC" ] && [ -x "$BUILD/tools/llmrt" ] || { echo "build first (tools/setup.sh --no-run)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/plans"
cp "$BUILD/tools/llmrt" "$OUT/bin/"
# Every shared library llmrt loads except the C library's own (libc, libm, ld.so: the GPU
# machine's are used; libcuda is loaded at run time from the driver).
ldd "$BUILD/tools/llmrt" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in libc.so.*|libm.so.*|ld-linux*|libdl.so.*|libpthread.so.*|librt.so.*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
TINY=$ROOT/tests/fixtures/tiny/llama
QUANT=$ROOT/tests/fixtures/quant
compile() { "$LLMC" compile -q "$@"; }
# Small plans for the differential checks (every CUDA op against the CPU backend): on the f32
# CUDA-core path (--no-tensor-cores; tolerance 1e-3), and two on the tensor cores (*_tc: TF32
# prefill, tolerance 5e-3).
compile "$TINY" -o "$OUT/plans/tiny_llama_tc.fb" --target "$TARGET"
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma_tc.fb" --target "$TARGET" \
  --weight-layout cuda-mma --cpu-kernels reference
compile() { "$LLMC" compile -q --no-tensor-cores "$@"; }
compile "$TINY" -o "$OUT/plans/tiny_llama_f32.fb" --target "$TARGET"
compile "$ROOT/tests/fixtures/tiny/llama3_rope" -o "$OUT/plans/tiny_llama3_rope_f32.fb" --target "$TARGET"
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma --cpu-kernels reference
compile "$QUANT/gptq_8bit_sym" -o "$OUT/plans/gptq8_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --cpu-kernels reference
compile "$QUANT/awq_4bit_gemm" -o "$OUT/plans/awq4_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --cpu-kernels reference
# Dense bf16 weights (with q/k/v biases) and quantized tables (int8 like GGUF's Q8_0 token table,
# read by the embedding gather and the logits).
compile "$ROOT/tests/fixtures/tiny/qwen2" -o "$OUT/plans/tiny_qwen2_bf16.fb" --target "$TARGET" --weight-dtype bf16
compile "$TINY" -o "$OUT/plans/tiny_llama_int8_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --quantize int8 --cpu-kernels reference
compile "$ROOT/tests/fixtures/tiny/mistral_swa" -o "$OUT/plans/tiny_mistral_swa_kv8.fb" --target "$TARGET" \
  --kv-cache-dtype int8
compile() { "$LLMC" compile -q "$@"; }
# Llama-3-8B shapes, weights generated at load: int4-g128 (GPTQ-like: embedding and lm_head stay
# bf16) and dense bf16.
CFG=$(mktemp -d)
cp "$ROOT/tests/gpu/llama3_8b_config.json" "$CFG/config.json"
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_int4_g128.fb" --target "$TARGET" \
  --quantize int4-g128 --no-quantize-embeddings --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_bf16.fb" --target "$TARGET" --weight-dtype bf16 \
  --max-model-len 4096
# The int4 plan without tensor-core kernels: prefill on the f32 CUDA-core GEMV (their win, measured).
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_int4_g128_notc.fb" --target "$TARGET" \
  --quantize int4-g128 --no-quantize-embeddings --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096 \
  --no-tensor-cores
# A small model with a 2048-token context: long prompts prefilled in steps of 16 rows take the
# split (flash-decoding) attention path, checked against the CPU.
cp "$ROOT/tests/gpu/long_context_config.json" "$CFG/config.json"
compile --synthetic-weights 2 "$CFG" -o "$OUT/plans/long_context_f32.fb" --target "$TARGET" --no-tensor-cores
# The same on the tensor cores: long prompts prefilled in steps of 512 rows take the tiled attention.
compile --synthetic-weights 2 "$CFG" -o "$OUT/plans/long_context_tc.fb" --target "$TARGET"
rm -rf "$CFG"
cp "$ROOT/tools/gpu/run_checks.sh" "$ROOT/tools/gpu/compare_logits.py" "$ROOT/tools/gpu/hf_decode_bench.py" \
   "$ROOT/tests/gpu/llama3_8b_config.json" "$OUT/"
du -sh "$OUT"
