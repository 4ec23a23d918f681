#!/usr/bin/env bash
# The GPU check, run from the repository root on a machine with an NVIDIA GPU, after
# tools/gpu/make_bundle.sh prepared gpu-bundle/ (a prebuilt llmrt with its libraries and small
# plans; the device needs no toolchain and no network). One run, well inside 10 minutes:
#   1. llmrt devices: driver, device, the image every kernel loads, the memory plan;
#   2. the differential check: every plan's logits at every prompt position on the GPU against
#      the CPU backend (reference contract), tolerance 1e-3 of the largest |logit|, and greedy
#      continuations compared token by token;
#   3. llmrt bench --device cuda on Llama-3-8B shapes (int4-g128 and bf16), decode at batch 1 and
#      32, next to the bandwidth bound (weight bytes read per token / device read bandwidth
#      measured here) and Hugging Face transformers (eager; compiled with a static cache) when
#      PyTorch is installed.
# Results go to $OUT (default ./gpu-results): results.md plus every raw JSON. Without a GPU every
# part says it skipped and why, and the script exits 0.
#
#   bash gpu-bundle/run_checks.sh            (OUT=/some/dir to choose where results go)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(pwd)/gpu-bundle
OUT=${OUT:-$(pwd)/gpu-results}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LLMRT="$B/bin/llmrt"
MD="$OUT/results.md"
: > "$MD"
say() { echo "$*" | tee -a "$MD"; }
status=0

say "# llmc GPU check ($(date -u +%FT%TZ))"
say '```'
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: none") | tee -a "$MD"
"$LLMRT" devices "$B/plans/llama3_8b_int4_g128.fb" 2>&1 | tee -a "$MD"
say '```'
if ! "$LLMRT" devices 2>/dev/null | grep -q "^CUDA driver"; then
  say "SKIPPED: no CUDA driver or device on this machine; the GPU checks did not run."
  exit 0
fi

say "## Differential check: CUDA vs CPU logits (tolerance 1e-3 x max|logit|; *_tc plans, TF32 tensor cores: 5e-3)"
PROMPT24="1,5,9,13,2,7,11,3,8,4,6,10,12,14,15,16,17,18,19,20,21,22,23,24"
# *_tc plans: 80 tokens, so that the prefill (one step of 80 rows) runs the tiled attention too.
PROMPT80="$PROMPT24,$(python3 -c "print(','.join(str((7 * i + 3) % 100 + 1) for i in range(56)))")"
for plan in "$B"/plans/tiny_*.fb "$B"/plans/gptq*.fb "$B"/plans/awq*.fb; do
  name=$(basename "$plan" .fb)
  tol=1e-3 PROMPT=$PROMPT24
  case $name in *_tc) tol=5e-3 PROMPT=$PROMPT80 ;; esac  # TF32 tensor-core prefill
  ok=1
  for dev in cpu cuda; do
    timeout 120 "$LLMRT" run "$plan" --device "$dev" --cpu-kernels reference --prompt-ids "$PROMPT" \
      --max-tokens 0 --all-logits-out "$OUT/$name.$dev.npy" > "$OUT/$name.$dev.log" 2>&1 || ok=0
    timeout 120 "$LLMRT" run "$plan" --device "$dev" --cpu-kernels reference --prompt-ids "$PROMPT" \
      --max-tokens 24 --temperature 0 --ignore-eos --json > "$OUT/$name.$dev.gen.json" 2>> "$OUT/$name.$dev.log" || ok=0
  done
  if [ $ok = 1 ]; then
    python3 "$B/compare_logits.py" "$OUT/$name.cpu.npy" "$OUT/$name.cuda.npy" \
      "$OUT/$name.cpu.gen.json" "$OUT/$name.cuda.gen.json" --name "$name" --tol "$tol" | tee -a "$MD" || status=1
  else
    say "$name: FAILED to run (see $name.*.log)"; tail -3 "$OUT/$name.cuda.log" | tee -a "$MD"; status=1
  fi
done

# Long contexts: 1500 prompt tokens on the GPU against the CPU, prefilled STEP rows at a time.
LONG=$(python3 -c "print(','.join(str((37 * i + 11) % 1000 + 3) for i in range(1500)))")
long_check() {  # plan step tolerance
  local name=$1 step=$2 tol=$3 ok=1
  for dev in cpu cuda; do
    timeout 200 "$LLMRT" run "$B/plans/$name.fb" --device "$dev" --prompt-ids "$LONG" --step-tokens "$step" \
      --max-tokens 0 --all-logits-out "$OUT/$name.$dev.npy" > "$OUT/$name.$dev.log" 2>&1 || ok=0
    timeout 200 "$LLMRT" run "$B/plans/$name.fb" --device "$dev" --prompt-ids "$LONG" --step-tokens "$step" \
      --max-tokens 16 --temperature 0 --ignore-eos --json > "$OUT/$name.$dev.gen.json" 2>> "$OUT/$name.$dev.log" || ok=0
  done
  if [ $ok = 1 ]; then
    python3 "$B/compare_logits.py" "$OUT/$name.cpu.npy" "$OUT/$name.cuda.npy" \
      "$OUT/$name.cpu.gen.json" "$OUT/$name.cuda.gen.json" --name "$name (1500 tokens, steps of $step)" --tol "$tol" \
      | tee -a "$MD" || status=1
  else
    say "$name: FAILED to run (see $name.*.log)"; tail -3 "$OUT/$name.cuda.log" | tee -a "$MD"; status=1
  fi
}
# Steps of 16 rows: attention splits each row's positions over blocks (up to 6 chunks) and
# combines them (flash-decoding).
long_check long_context_f32 16 1e-3
# Steps of 512 rows on the tensor cores: the tiled (FlashAttention-style) prefill attention over
# up to 1024 cached positions, then decode on the per-row kernel.
long_check long_context_tc 512 5e-3

say "## Decode speed, Llama-3-8B shapes (synthetic weights)"
BW=$(python3 - <<'PY' 2>/dev/null
import torch
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): y.copy_(x)
e.record(); torch.cuda.synchronize()
# a copy reads and writes every byte: read bandwidth = bytes / (time / 2)
print(f"{x.numel() * 10 * 2 / (s.elapsed_time(e) / 1e3) / 1e9:.1f}")
PY
)
say "device copy bandwidth (read+write, torch): ${BW:-unknown (no PyTorch)} GB/s"
for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
  timeout 400 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp 512 --tg 64 --batch 32 -r 2 \
    --json-out "$OUT/$plan.bench.json" > "$OUT/$plan.bench.txt" 2>&1 || { say "$plan: bench FAILED"; status=1; }
  say '```'; cat "$OUT/$plan.bench.txt" | tee -a "$MD" > /dev/null; say '```'
  # The same decode at batch 1 launched kernel by kernel: what the CUDA graphs save.
  timeout 200 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp 0 --tg 64 --batch 0 -r 2 --no-cuda-graphs \
    > "$OUT/$plan.eager.txt" 2>&1 || say "$plan: eager bench FAILED"
  say "without CUDA graphs:"; say '```'; cat "$OUT/$plan.eager.txt" | tee -a "$MD" > /dev/null; say '```'
  "$LLMRT" inspect "$B/plans/$plan.fb" --json > "$OUT/$plan.inspect.json" 2>/dev/null
  python3 - "$OUT/$plan.inspect.json" "$OUT/$plan.bench.json" "${BW:-0}" <<'PY' | tee -a "$MD"
import json, sys
ins, bench, bw = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
total = ins["tensors"]["bytes"]
vocab, hidden = ins["model"]["vocab_size"], ins["model"]["hidden_size"]
per_token = total - vocab * hidden * 2  # a decode step reads one row of the (bf16) embedding table
prog = ins["program"]
print(f"kernels per decode step: {prog['steps'] + int(prog.get('logits_summary_on_gpu', False))} "
      f"({', '.join(f'{k} {v}' for k, v in sorted(prog['ops'].items()))})")
for t in bench["tests"]:
    if t["kind"] not in ("tg", "batch"):  # decode at batch 1, batched decode
        continue
    line = f"{t['name']} batch {t['batch']}: {t['tokens_per_s']:.1f} tok/s"
    if bw > 0 and t["batch"] == 1:
        bound = bw / 2 * 1e9 / per_token  # copy bandwidth / 2 ~ read bandwidth
        line += f"; bound {bound:.1f} tok/s ({per_token / 1e9:.2f} GB/token): {100 * t['tokens_per_s'] / bound:.0f}%"
    print(line)
PY
done
say "prefill of 512 and 2048 tokens, int4-g128, with tensor-core kernels (TF32 linear tiles, tiled attention) and without (--no-tensor-cores: f32 CUDA-core GEMV, per-row attention):"
for plan in llama3_8b_int4_g128 llama3_8b_int4_g128_notc; do
  for pp in 512 2048; do
    timeout 200 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp "$pp" --tg 0 --batch 0 -r 2 \
      > "$OUT/$plan.pp$pp.txt" 2>&1 || say "$plan pp$pp bench FAILED"
    say "$plan:"; say '```'; cat "$OUT/$plan.pp$pp.txt" | tee -a "$MD" > /dev/null; say '```'
  done
done
say "prefill of 2048 tokens, int4-g128, paged attention on the per-row kernel (--no-tiled-attention; the tiled kernel's win, next to the pp2048 above):"
timeout 200 "$LLMRT" bench "$B/plans/llama3_8b_int4_g128.fb" --device cuda --pp 2048 --tg 0 --batch 0 -r 2 --no-tiled-attention \
  > "$OUT/llama3_8b_int4_g128.pp2048_per_row.txt" 2>&1 || say "per-row attention bench FAILED"
say '```'; cat "$OUT/llama3_8b_int4_g128.pp2048_per_row.txt" | tee -a "$MD" > /dev/null; say '```'
say "device time per kernel (CUDA events, launched one by one), int4-g128 and bf16: prefill of 512, decode at batch 1:"
for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
  timeout 200 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp 512 --tg 32 --batch 0 -r 1 --profile \
    > "$OUT/$plan.profile.txt" 2>&1 || say "$plan profile FAILED"
  say "$plan:"; say '```'; cat "$OUT/$plan.profile.txt" | tee -a "$MD" > /dev/null; say '```'
done
say "decode at batch 1 after a 3968-token prompt (int4-g128; attention split over blocks, flash-decoding):"
timeout 300 "$LLMRT" bench "$B/plans/llama3_8b_int4_g128.fb" --device cuda --pp 0 --tg 64 --batch 0 --depth 3968 -r 2 \
  > "$OUT/llama3_8b_int4_g128_depth.txt" 2>&1 || say "depth bench FAILED"
say '```'; cat "$OUT/llama3_8b_int4_g128_depth.txt" | tee -a "$MD" > /dev/null; say '```'
if python3 -c "import torch, transformers" 2>/dev/null; then
  timeout 500 python3 "$B/hf_decode_bench.py" "$B/llama3_8b_config.json" --batch 1,32 --tokens 64 \
    --json "$OUT/hf_decode.json" 2>&1 | tee -a "$MD" || say "transformers bench FAILED"
else
  say "SKIPPED: transformers comparison (PyTorch/transformers not installed)"
fi
exit $status
