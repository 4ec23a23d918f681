#!/usr/bin/env bash
# Prepares what the GPU check (tools/gpu/run_checks.sh) needs on a machine with a GPU and no
# network or toolchain: a self-contained llmrt (its shared libraries beside it, glibc excepted)
# and small plans compiled here for sm_90 (H100/H200). Big models do not travel: the
# Llama-3-8B-shaped plans carry no weights (llmc --synthetic-weights), llmrt generates them at
# load. Writes gpu-bundle/ and gpu-bundle.tar.xz (both git-ignored; the archive is what travels:
# with the tracked files it stays well under the 64 MiB a device run may carry).
#
#   tools/gpu/make_bundle.sh [--target sm_90] [--dir DIR] [--big-config CONFIG] [--no-archive]
#
# --dir: write DIR/gpu-bundle and DIR/gpu-bundle.tar.xz (default: the repository root).
# --big-config: the config of the "llama3_8b_*" plans (default tests/gpu/llama3_8b_config.json);
# the rehearsal of the GPU script against the stand-in driver (tests/cli/test_gpu_script.py)
# passes a small one, as a host could not hold the 8B plans' weights.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${LLMC_BUILD_DIR:-$ROOT/build}
TARGET=sm_90
BIG_CONFIG=$ROOT/tests/gpu/llama3_8b_config.json
ARCHIVE=1
DIR=$ROOT
while [ $# -gt 0 ]; do
  case $1 in
    --target) TARGET=$2; shift 2 ;;
    --big-config) BIG_CONFIG=$(realpath "$2"); shift 2 ;;
    --dir) mkdir -p "$2"; DIR=$(realpath "$2"); shift 2 ;;
    --no-archive) ARCHIVE=0; shift ;;
    *) echo "make_bundle.sh: unknown option $1 (--target SM, --dir DIR, --big-config CONFIG, --no-archive)" >&2
       exit 2 ;;
  esac
done
OUT=$DIR/gpu-bundle
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
# CUDA-core path (--no-tensor-cores; tolerance 1e-3), on the tensor cores (*_tc: TF32 prefill and
# tiled attention, tolerance 5e-3) and with bf16 weights through cuBLASLt (*_bf16lib).
compile "$TINY" -o "$OUT/plans/tiny_llama_tc.fb" --target "$TARGET"
# (the int4 _tc plan keeps its linear steps on the generated TF32 tiles and f32 GEMV; _lib is the
# default: dequant_bf16 + cuBLASLt from 16 rows, the int8-activation GEMV below)
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma_tc.fb" --target "$TARGET" \
  --weight-layout cuda-mma --cpu-kernels reference --quant-gemm generated --quant-gemv f32
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma_lib.fb" --target "$TARGET" \
  --weight-layout cuda-mma
compile "$ROOT/tests/fixtures/tiny/qwen2" -o "$OUT/plans/tiny_qwen2_bf16lib.fb" --target "$TARGET" --weight-dtype bf16
# A bf16 KV cache (f32 weights) on the tensor cores: the tiled attention's 16-bit loads.
compile "$TINY" -o "$OUT/plans/tiny_llama_tc_kvbf16.fb" --target "$TARGET" --kv-cache-dtype bf16
# An fp8 (E4M3) KV cache, the same way: 4 elements in one 4-byte load, the decode attention's
# own k and v rounded as the cache holds them.
compile "$TINY" -o "$OUT/plans/tiny_llama_tc_kvfp8.fb" --target "$TARGET" --kv-cache-dtype fp8
# llama.cpp's Q4_K_M of a tiny Llama (Q4_K as int4-g256s32-f16-min, Q6_K as int8-g256s16-f16-sym:
# sub-scales): prefill through dequant_bf16 and the GEMM library.
KQ4KM=$ROOT/tests/fixtures/kquant/tiny_q4_k_m.gguf
compile "$KQ4KM" -o "$OUT/plans/kq4km_mma_lib.fb" --target "$TARGET" --weight-layout cuda-mma
# llama.cpp's IQ4_XS of it (nl codes: the grid's values by byte permutes), the same two ways.
KIQ4XS=$ROOT/tests/fixtures/kquant/tiny_iq4_xs.gguf
compile "$KIQ4XS" -o "$OUT/plans/kiq4xs_mma_lib.fb" --target "$TARGET" --weight-layout cuda-mma
compile() { "$LLMC" compile -q --no-tensor-cores "$@"; }
# ... and on the int8-activation GEMVs at every row count.
compile "$KQ4KM" -o "$OUT/plans/kq4km_mma.fb" --target "$TARGET" --weight-layout cuda-mma
compile "$KIQ4XS" -o "$OUT/plans/kiq4xs_mma.fb" --target "$TARGET" --weight-layout cuda-mma
# ... and its Q3_K_M (Q3_K as int4-g256s16-f16-sym: a scale per k-step; with Q4_K, Q5_K and Q6_K).
compile "$ROOT/tests/fixtures/kquant/tiny_q3_k_m.gguf" -o "$OUT/plans/kq3km_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma
# ... and its Q2_K (int4-g256s16-f16-min: a scale and a min per k-step; the token table too).
compile "$ROOT/tests/fixtures/kquant/tiny_q2_k.gguf" -o "$OUT/plans/kq2k_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma
# ... its Q5_0 and Q5_K_M (int5 codes: a span's fifth bits after its nibbles; Q5_K with sub-scales).
compile "$ROOT/tests/fixtures/kquant/tiny_q5_0.gguf" -o "$OUT/plans/kq50_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma
compile "$ROOT/tests/fixtures/kquant/tiny_q5_k_m.gguf" -o "$OUT/plans/kq5km_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma
compile "$TINY" -o "$OUT/plans/tiny_llama_f32.fb" --target "$TARGET"
compile "$ROOT/tests/fixtures/tiny/llama3_rope" -o "$OUT/plans/tiny_llama3_rope_f32.fb" --target "$TARGET"
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma.fb" --target "$TARGET" \
  --weight-layout cuda-mma --cpu-kernels reference
compile "$QUANT/gptq_8bit_sym" -o "$OUT/plans/gptq8_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --cpu-kernels reference
compile "$QUANT/awq_4bit_gemm" -o "$OUT/plans/awq4_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --cpu-kernels reference
# The quantized GEMV over f32 activations (the default reads int8 ones, the fast contract).
compile "$QUANT/gptq_4bit_desc_act" -o "$OUT/plans/gptq4_desc_act_mma_f32gemv.fb" --target "$TARGET" \
  --weight-layout cuda-mma --cpu-kernels reference --quant-gemv f32
compile "$QUANT/awq_4bit_gemm" -o "$OUT/plans/awq4_mma_f32gemv.fb" --target "$TARGET" --weight-layout cuda-mma \
  --cpu-kernels reference --quant-gemv f32
# Dense bf16 weights (with q/k/v biases) and quantized tables (int8 like GGUF's Q8_0 token table,
# read by the embedding gather and the logits).
compile "$ROOT/tests/fixtures/tiny/qwen2" -o "$OUT/plans/tiny_qwen2_bf16.fb" --target "$TARGET" --weight-dtype bf16
compile "$TINY" -o "$OUT/plans/tiny_llama_int8_mma.fb" --target "$TARGET" --weight-layout cuda-mma \
  --quantize int8 --cpu-kernels reference
compile "$ROOT/tests/fixtures/tiny/mistral_swa" -o "$OUT/plans/tiny_mistral_swa_kv8.fb" --target "$TARGET" \
  --kv-cache-dtype int8
# An f16 KV cache under a sliding window (the plans with bf16 weights keep bf16 caches: the
# default --kv-cache-dtype auto follows --weight-dtype).
compile "$ROOT/tests/fixtures/tiny/mistral_swa" -o "$OUT/plans/tiny_mistral_swa_kvf16.fb" --target "$TARGET" \
  --kv-cache-dtype f16
# The tiny llama with a byte-level tokenizer (256 byte tokens, a few merges; written here), for
# `llmrt serve`, which needs one.
TOK=$(mktemp -d)
cp "$TINY/config.json" "$TINY/model.safetensors" "$TOK/"
python3 - "$TOK/tokenizer.json" <<'PY'
import json, sys
# GPT-2's byte-to-character table: printable bytes map to themselves, the rest to 256 + n.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
chars = [chr(c) for _, c in sorted(zip(bs, cs))]
vocab = {ch: i for i, ch in enumerate(chars)}
merges = [["t", "h"], ["th", "e"], ["\u0120", "t"], ["i", "n"], ["e", "r"]]
for a, b in merges:
    vocab[a + b] = len(vocab)
tok = {"version": "1.0", "added_tokens": [], "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                           "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                 "vocab": vocab, "merges": [" ".join(m) for m in merges]}}
json.dump(tok, open(sys.argv[1], "w"))
PY
compile "$TOK" -o "$OUT/plans/tiny_llama_f32_tok.fb" --target "$TARGET"
rm -rf "$TOK"
compile() { "$LLMC" compile -q "$@"; }
# Llama-3-8B shapes, weights generated at load: int4-g128 (GPTQ-like: embedding and lm_head stay
# bf16) and dense bf16; KV caches in bf16 (--kv-cache-dtype auto, from --weight-dtype bf16), as
# transformers keeps them for a bf16 model.
CFG=$(mktemp -d)
cp "$BIG_CONFIG" "$CFG/config.json"
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_int4_g128.fb" --target "$TARGET" \
  --quantize int4-g128 --no-quantize-embeddings --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_bf16.fb" --target "$TARGET" --weight-dtype bf16 \
  --max-model-len 4096
# GGUF's Q4_K, Q5_K and Q3_K as held (sub-scales; int5 codes; int4 sub-scales of 16), every
# projection and the lm_head.
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_q4k.fb" --target "$TARGET" \
  --quantize int4-g256s32-f16-min --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_q5k.fb" --target "$TARGET" \
  --quantize int5-g256s32-f16-min --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_q3k.fb" --target "$TARGET" \
  --quantize int4-g256s16-f16-sym --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096
# The int4 plan's decode GEMV over f32 activations instead of int8 ones (dp4a): the A/B.
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_int4_g128_f32gemv.fb" --target "$TARGET" \
  --quantize int4-g128 --no-quantize-embeddings --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096 \
  --quant-gemv f32
# Both 8B plans with decode GEMVs that wait before reading any weight (no L2 prefetch while the
# kernel before them runs): the A/B of --gemv-l2-prefetch.
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_int4_g128_noprefetch.fb" --target "$TARGET" \
  --quantize int4-g128 --no-quantize-embeddings --weight-dtype bf16 --weight-layout cuda-mma --max-model-len 4096 \
  --gemv-l2-prefetch 0
compile --synthetic-weights 1 "$CFG" -o "$OUT/plans/llama3_8b_bf16_noprefetch.fb" --target "$TARGET" --weight-dtype bf16 \
  --max-model-len 4096 --gemv-l2-prefetch 0
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
# A 32768-token vocabulary: decode steps summarize each logits row in 16 parts, a block each.
cp "$ROOT/tests/gpu/wide_vocab_config.json" "$CFG/config.json"
compile --synthetic-weights 3 "$CFG" -o "$OUT/plans/wide_vocab_f32.fb" --target "$TARGET" --no-tensor-cores
rm -rf "$CFG"

# The CPU side of the differential checks, computed here (the GPU machine runs only the CUDA side).
R=$OUT/ref
mkdir -p "$R"
LLMRT=$BUILD/tools/llmrt
PROMPT24="1,5,9,13,2,7,11,3,8,4,6,10,12,14,15,16,17,18,19,20,21,22,23,24"
# 80 tokens: the prefill (one step of 80 rows) runs the tensor-core GEMM and the tiled attention.
PROMPT80="$PROMPT24,$(python3 -c "print(','.join(str((7 * i + 3) % 100 + 1) for i in range(56)))")"
echo "$PROMPT80" > "$R/prompt80.ids"
: > "$R/cases.txt"
# case NAME PLAN TOL PROMPT [GPU-only flags]: CPU logits at every prompt position and 24 greedy tokens
# (the CPU under the contract $CONTRACT, default reference).
case_ref() {
  local name=$1 plan=$2 tol=$3 prompt=$4
  shift 4
  echo "--prompt-ids $prompt --max-tokens 24 --temperature 0 --ignore-eos --cpu-kernels ${CONTRACT:-reference}" \
    > "$R/$name.args"
  "$LLMRT" run "$OUT/plans/$plan.fb" --device cpu $(cat "$R/$name.args") --all-logits-out "$R/$name.cpu.npy" --json \
    > "$R/$name.cpu.gen.json"
  echo "$name $plan $tol $*" >> "$R/cases.txt"
}
for plan in tiny_llama_f32 tiny_llama3_rope_f32 gptq4_desc_act_mma_f32gemv awq4_mma_f32gemv tiny_qwen2_bf16 \
            tiny_mistral_swa_kv8 tiny_mistral_swa_kvf16; do
  case_ref "$plan" "$plan" 1e-3 "$PROMPT24"
done
# Quantized GEMVs over int8 activations against the CPU's fast contract, which quantizes them
# alike: an input the two backends compute a rounding apart can land a code apart, so 1e-2.
for plan in gptq4_desc_act_mma gptq8_mma awq4_mma tiny_llama_int8_mma; do
  CONTRACT=fast case_ref "$plan" "$plan" 1e-2 "$PROMPT24"
done
# (awq4: head_dim 32, so every GEMV's int8 input is written by the step before it, attention
# included; with --no-fused-quantize each GEMV's quantize_q8 kernel writes it)
CONTRACT=fast case_ref awq4_mma_unfused awq4_mma 1e-2 "$PROMPT24" --no-fused-quantize
CONTRACT=fast case_ref gptq4_desc_act_mma_lib gptq4_desc_act_mma_lib 2e-2 "$PROMPT80"
CONTRACT=fast case_ref kq4km_mma kq4km_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kq4km_mma_lib kq4km_mma_lib 2e-2 "$PROMPT80"
CONTRACT=fast case_ref kiq4xs_mma kiq4xs_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kq3km_mma kq3km_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kq2k_mma kq2k_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kq50_mma kq50_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kq5km_mma kq5km_mma 1e-2 "$PROMPT24"
CONTRACT=fast case_ref kiq4xs_mma_lib kiq4xs_mma_lib 2e-2 "$PROMPT80"
case_ref wide_vocab_f32 wide_vocab_f32 1e-3 "$PROMPT24"
case_ref tiny_llama_tc tiny_llama_tc 5e-3 "$PROMPT80"
case_ref tiny_llama_tc_kvbf16 tiny_llama_tc_kvbf16 5e-3 "$PROMPT80"
case_ref tiny_llama_tc_kvfp8 tiny_llama_tc_kvfp8 5e-3 "$PROMPT80"
case_ref tiny_llama_tc_nographs tiny_llama_tc 5e-3 "$PROMPT80" --no-cuda-graphs
case_ref gptq4_desc_act_mma_tc gptq4_desc_act_mma_tc 5e-3 "$PROMPT80"
case_ref tiny_qwen2_bf16lib tiny_qwen2_bf16lib 2e-2 "$PROMPT80"
case_ref tiny_qwen2_bf16lib_generated tiny_qwen2_bf16lib 5e-3 "$PROMPT80" --no-gemm-library
# Three prompts in one step (3, 24 and 80 tokens), then decoding together.
batch_ref() {  # NAME PLAN TOL
  echo "$2" > "$R/$1.plan"
  echo "$3" > "$R/$1.tol"
  echo "--prompt-ids 3,1,4 --prompt-ids $PROMPT24 --prompt-ids $PROMPT80 --max-tokens 16 --temperature 0 --ignore-eos" \
    "--cpu-kernels reference" > "$R/$1.args"
  "$LLMRT" run "$OUT/plans/$2.fb" --device cpu $(cat "$R/$1.args") --logits-out "$R/$1.cpu.npy" --json \
    > "$R/$1.cpu.gen.json"
}
batch_ref batch3_f32 tiny_llama_f32 1e-3
batch_ref batch3_tc tiny_llama_tc 5e-3
batch_ref batch3_wide_vocab wide_vocab_f32 1e-3
# 1500 tokens on the long-context model (one CPU reference for both GPU plans: the CPU ignores
# tensor cores, and its results do not depend on the step size).
python3 -c "print(','.join(str((37 * i + 11) % 1000 + 3) for i in range(1500)))" > "$R/long.ids"
"$LLMRT" run "$OUT/plans/long_context_f32.fb" --device cpu --prompt-ids "$(cat "$R/long.ids")" --step-tokens 512 \
  --max-tokens 16 --temperature 0 --ignore-eos --all-logits-out "$R/long.cpu.npy" --json > "$R/long.cpu.gen.json"
# The serve check's expected texts: the same requests against `llmrt serve` on the CPU.
"$LLMRT" serve "$OUT/plans/tiny_llama_f32_tok.fb" --device cpu --port 18086 --max-num-seqs 8 2> "$R/serve_cpu.log" &
SERVE=$!
python3 "$ROOT/tools/gpu/serve_check.py" --url http://127.0.0.1:18086 --record "$R/serve_expected.json"
kill -TERM $SERVE; wait $SERVE || true

cp "$ROOT/tools/gpu/run_checks.sh" "$ROOT/tools/gpu/compare_logits.py" "$ROOT/tools/gpu/hf_decode_bench.py" \
   "$ROOT/tools/gpu/serve_check.py" "$OUT/"
cp "$BIG_CONFIG" "$OUT/llama3_8b_config.json"
du -sh "$OUT"
# What travels: the bundle compressed (the plans' PTX and CUBIN shrink ~5x), since the device
# run carries the working tree (~23 MiB tracked) plus this within 64 MiB, which the bundle itself
# (~130 MiB) no longer fits. On the device: tar -xJf gpu-bundle.tar.xz && bash gpu-bundle/run_checks.sh
# (Python's tarfile reads it too where xz is missing).
rm -f "$DIR/gpu-bundle.tar.xz"
[ "$ARCHIVE" = 1 ] || exit 0
XZ_OPT='-6 -T0' tar -C "$DIR" -cJf "$DIR/gpu-bundle.tar.xz" gpu-bundle
du -sh "$DIR/gpu-bundle.tar.xz"
# The run's 64 MiB: refuse a bundle that would not travel with the tracked files.
TRACKED=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')
CARRIED=$(( (TRACKED + $(stat -c %s "$DIR/gpu-bundle.tar.xz")) / 1048576 ))
echo "the device run carries $CARRIED MiB of its 64 (tracked files and the archive)"
if [ "$CARRIED" -ge 64 ]; then
  echo "make_bundle.sh: tracked files and gpu-bundle.tar.xz make $CARRIED MiB, over the device run's 64" >&2
  exit 1
fi
echo "carry gpu-bundle.tar.xz; on the device: tar -xJf gpu-bundle.tar.xz && bash gpu-bundle/run_checks.sh"
