#!/usr/bin/env bash
# The GPU check, run from the repository root on a machine with an NVIDIA GPU, after
# tools/gpu/make_bundle.sh prepared gpu-bundle/ (a prebuilt llmrt with its libraries, small plans
# and the CPU backend's reference outputs for them; the device needs no toolchain and no network).
#
# Stages, in order of importance (what issue 7 asks to show first, then what explains the
# figures); each runs only if the time budget still holds it, else it says it skipped and why:
#   env        nvidia-smi, `llmrt devices` (driver, device, the image every kernel loads, memory)
#   diff       every small plan's logits at every prompt position on the GPU against the CPU
#              backend (reference contract, computed by make_bundle.sh), tolerance a fraction of
#              max |logit| per plan; greedy continuations compared token by token; a batch of 3
#              prompts of different lengths in one step; sampled continuations (temperature 1,
#              top-p 0.9) drawn by the sampling kernel against --no-device-sampling's host draws
#   long       1500-token prompts in steps of 16 (split attention) and 512 (tiled attention)
#   serve      llmrt serve --device cuda under 12 concurrent requests
#   sanitizer  compute-sanitizer memcheck / racecheck on small plans
#   bandwidth  device read bandwidth (a sum over 4 GiB through PyTorch; a copy's for reference)
#   bench      llmrt bench on Llama-3-8B shapes (int4-g128, bf16): prefill 512/2048, decode at
#              batch 1 and 32, next to the bandwidth bound (weight bytes per token / bandwidth)
#   hf         Hugging Face transformers eager on the same shapes (bf16, batch 1 and 32)
#   hfcompiled transformers under torch.compile with a static cache
#   profile    device time per kernel (CUDA events), prefill 512 and batch-1 decode
#   gemv       int4-g128 decode (batch 1 and 8) on the GEMV over f32 activations, to compare with the
#              default int8-activation (dp4a) GEMV of the bench stage; and with a quantize_q8
#              launch before each GEMV (--no-fused-quantize); bf16 decode with each layer's
#              rope_kv_store launched apart from its attention (--no-rope-in-attention); both 8B
#              plans' batch-1 decode with each layer's silu_mul launched apart from its gate|up
#              GEMV (--no-silu-in-gemv), and with each add_rms_norm launched apart from the GEMV
#              before it (--no-norm-in-gemv); both 8B plans' batch-1 decode with GEMVs that ask
#              the L2 for nothing before their wait on the kernel before them (plans compiled
#              with --gemv-l2-prefetch 0)
#   graphs     batch-1 decode without CUDA graphs (what graphs save), and without programmatic
#              dependent launch (what overlapping a kernel's launch with the previous kernel saves)
#   sampling   int4-g128 decode at batch 1 and 32 sampled at temperature 1, and 0.6 with top-p 0.9
#              (draws the summary cannot decide): on the device's sampling kernel, and with
#              --no-device-sampling (rows copied back, drawn on the host)
#   depth      batch-1 decode after a 3968-token prompt (flash-decoding)
#   prefill    prefill without tensor cores, with per-row attention, bf16 and int4 without cuBLASLt
# Results: $OUT/results.md (a table of every figure) and $OUT/raw.tgz (logs and JSON).
#
#   tar -xJf gpu-bundle.tar.xz && bash gpu-bundle/run_checks.sh   (the archive make_bundle.sh writes travels)
#   CHECK_BUDGET_S=300 CHECKS="diff bench" bash gpu-bundle/run_checks.sh   (a budget, some stages)
#   CHECK_BANDWIDTH_GBS=N: no bandwidth stage, the bound takes N GB/s (the rehearsal on the stand-in
#   driver, tests/cli/test_gpu_script.py)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
B=$(pwd)/gpu-bundle
OUT=${OUT:-$(pwd)/gpu-results}
RAW=${RAW:-/tmp/llmc-gpu-raw}
BUDGET=${CHECK_BUDGET_S:-540}
ONLY=" ${CHECKS:-all} "
mkdir -p "$OUT" "$RAW"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
LLMRT="$B/bin/llmrt"
MD="$OUT/results.md"
: > "$MD"
T0=$SECONDS
status=0
say() { echo "$*" | tee -a "$MD"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
# stage NAME SECONDS: whether NAME is selected and about SECONDS of the budget are left for it.
stage() {
  case $ONLY in *" all "* | *" $1 "*) ;; *) return 1 ;; esac
  if [ "$(left)" -lt "$2" ]; then
    say "SKIPPED $1: $(left) s of the ${BUDGET} s budget left, it needs about $2 s"
    return 1
  fi
  say ""
  say "## $1 (at $((SECONDS - T0)) s)"
}
# limit SECONDS CMD...: CMD under a timeout that never passes the budget.
limit() {
  local t=$1 l
  shift
  l=$(left)
  [ "$l" -lt "$t" ] && t=$l
  [ "$t" -lt 5 ] && t=5
  timeout -k 5 "$t" "$@"
}
fence() { say '```'; tee -a "$MD" < "$1" > /dev/null; say '```'; }
finish() {
  say ""
  say "total $((SECONDS - T0)) s; status $status"
  tar -C "$RAW" -czf "$OUT/raw.tgz" --exclude='*.npy' . 2>/dev/null
  exit $status
}

say "# llmc GPU check ($(date -u +%FT%TZ))"
if stage env 5; then
  say '```'
  (nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 || echo "nvidia-smi: none") \
    | tee -a "$MD"
  limit 60 "$LLMRT" devices "$B/plans/llama3_8b_int4_g128.fb" 2>&1 | tee -a "$MD"
  say '```'
fi
if ! "$LLMRT" devices 2>/dev/null | grep -q "^CUDA driver"; then
  say "SKIPPED: no CUDA driver or device on this machine; the GPU checks did not run."
  finish
fi

# compare NAME TOL [REF]: the GPU outputs in $RAW against the bundle's CPU ones (ref/REF.cpu.*,
# REF defaulting to NAME).
compare() {
  local name=$1 tol=$2 ref=${3:-$1}
  python3 "$B/compare_logits.py" "$B/ref/$ref.cpu.npy" "$RAW/$name.cuda.npy" \
    "$B/ref/$ref.cpu.gen.json" "$RAW/$name.cuda.gen.json" --name "$name" --tol "$tol" 2>&1 | tee -a "$MD" \
    || status=1
}
# gpu_run NAME PLAN ARGS...: the GPU side of a differential check (the CPU side ran in make_bundle.sh).
gpu_run() {
  local name=$1 plan=$2
  shift 2
  if ! limit 120 "$LLMRT" run "$B/plans/$plan.fb" --device cuda --all-logits-out "$RAW/$name.cuda.npy" --json "$@" \
      > "$RAW/$name.cuda.gen.json" 2> "$RAW/$name.cuda.log"; then
    say "$name: FAIL: llmrt run --device cuda exited non-zero:"
    tail -5 "$RAW/$name.cuda.log" | tee -a "$MD"
    status=1
    return 1
  fi
  [ -s "$RAW/$name.cuda.log" ] && sed 's/^/    /' "$RAW/$name.cuda.log" | head -5 | tee -a "$MD"
  return 0
}

if stage diff 40; then
  say "Differential check: CUDA vs CPU logits at every prompt position (fail above tol x max|logit|), 24 greedy tokens."
  say "f32 plans (--no-tensor-cores): tol 1e-3; *_tc (TF32 tensor cores, tiled attention, 80-token prompt): 5e-3;"
  say "*_bf16lib (bf16 weights through cuBLASLt, bf16 activations): 2e-2. Quantized plans whose GEMV reads int8"
  say "activations (the default) against the CPU's fast contract: 1e-2 (a code may land one apart), *_lib 2e-2."
  while read -r name plan tol args; do
    [ -f "$B/ref/$name.cpu.npy" ] || continue
    # shellcheck disable=SC2086
    gpu_run "$name" "$plan" $(cat "$B/ref/$name.args") $args && compare "$name" "$tol"
  done < "$B/ref/cases.txt"
  # A batch of 3 prompts of different lengths in one step (mixed rows), then decoding together
  # (the padded graph of batch 4): last-prompt logits and greedy tokens.
  for name in batch3_f32 batch3_tc batch3_wide_vocab; do  # shellcheck disable=SC2046
    [ -f "$B/ref/$name.cpu.npy" ] || continue
    plan=$(cat "$B/ref/$name.plan")
    # shellcheck disable=SC2046
    if limit 120 "$LLMRT" run "$B/plans/$plan.fb" --device cuda --logits-out "$RAW/$name.cuda.npy" --json \
        $(cat "$B/ref/$name.args") > "$RAW/$name.cuda.gen.json" 2> "$RAW/$name.cuda.log"; then
      compare "$name" "$(cat "$B/ref/$name.tol")"
    else
      say "$name: FAIL: llmrt run exited non-zero"; tail -5 "$RAW/$name.cuda.log" | tee -a "$MD"; status=1
    fi
  done
  # Draws at a temperature (which the logits summary cannot decide): the device's sampling kernel
  # must draw the tokens the host sampler draws from the same rows (--no-device-sampling).
  for plan in tiny_llama_f32 wide_vocab_f32; do
    for where in device host; do
      flag=""; [ "$where" = host ] && flag="--no-device-sampling"
      # shellcheck disable=SC2086
      limit 60 "$LLMRT" run "$B/plans/$plan.fb" --device cuda --prompt-ids 1,5,9 --prompt-ids 3,4 \
        --prompt-ids 7,8,9,10,11 --max-tokens 24 --ignore-eos --temperature 1 --top-p 0.9 --seed 5 --json $flag \
        > "$RAW/$plan.sampled.$where.json" 2> "$RAW/$plan.sampled.$where.log"
    done
    python3 - "$RAW/$plan.sampled.device.json" "$RAW/$plan.sampled.host.json" "$plan" <<'PY' | tee -a "$MD" || status=1
import json, sys
try:
    dev, host = (json.load(open(f))["outputs"] for f in sys.argv[1:3])
except Exception as e:
    print(f"{sys.argv[3]} sampled (temperature 1, top-p 0.9): FAIL: {e}"); sys.exit(1)
same = [d["output_ids"] == h["output_ids"] and d["logprobs"] == h["logprobs"] for d, h in zip(dev, host)]
ok = len(dev) == len(host) == 3 and all(same)
print(f"{sys.argv[3]} sampled (temperature 1, top-p 0.9, 3 prompts x 24 tokens): "
      f"{'PASS' if ok else 'FAIL'}: device draws {'equal' if ok else 'differ from'} the host sampler's")
sys.exit(0 if ok else 1)
PY
  done
fi

if stage long 30; then
  say "1500-token prompts, CUDA vs CPU logits at every position: steps of 16 rows (attention split over blocks, tol 1e-3),"
  say "steps of 512 rows on the tensor cores (tiled attention over up to 1024 cached positions, tol 5e-3)."
  for spec in "long_context_f32 16 1e-3" "long_context_tc 512 5e-3"; do
    read -r name step tol <<< "$spec"
    gpu_run "$name" "$name" --prompt-ids "$(cat "$B/ref/long.ids")" --step-tokens "$step" --max-tokens 16 \
      --temperature 0 --ignore-eos && compare "$name" "$tol" long
  done
fi

if stage serve 20; then
  say "llmrt serve --device cuda, tiny_llama_f32_tok: 12 concurrent completions (prompts of 3 to 90 token ids, greedy),"
  say "each compared with llmrt run on the CPU (make_bundle.sh)."
  "$LLMRT" serve "$B/plans/tiny_llama_f32_tok.fb" --device cuda --port 18087 --max-num-seqs 8 > "$RAW/serve.log" 2>&1 &
  SERVE=$!
  limit 60 python3 "$B/serve_check.py" --url http://127.0.0.1:18087 --expected "$B/ref/serve_expected.json" \
    2>&1 | tee -a "$MD" || status=1
  kill -TERM $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  tail -3 "$RAW/serve.log" | sed 's/^/    /' | tee -a "$MD"
fi

if stage sanitizer 40; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$CS" ]; then
    say "SKIPPED sanitizer: compute-sanitizer not found"
  else
    for spec in "memcheck tiny_llama_tc" "memcheck tiny_mistral_swa_kv8" "memcheck tiny_llama_tc_kvbf16" \
                "memcheck tiny_mistral_swa_kvf16" "memcheck tiny_llama_tc_kvfp8" "memcheck gptq4_desc_act_mma_tc" \
                "racecheck tiny_llama_tc" "memcheck tiny_qwen2_bf16lib" "memcheck wide_vocab_f32" \
                "racecheck wide_vocab_f32" "memcheck kq4km_mma"; do
      read -r tool plan <<< "$spec"
      [ -f "$B/plans/$plan.fb" ] || continue
      # shellcheck disable=SC2046
      if limit 90 "$CS" --tool "$tool" --error-exitcode 9 "$LLMRT" run "$B/plans/$plan.fb" --device cuda \
          --prompt-ids "$(cat "$B/ref/prompt80.ids")" --max-tokens 8 --temperature 0 --ignore-eos --json \
          > "$RAW/sanitizer.$tool.$plan.log" 2>&1; then
        say "$tool $plan: PASS ($(grep -m1 'ERROR SUMMARY' "$RAW/sanitizer.$tool.$plan.log" | sed 's/=* *//'))"
      else
        say "$tool $plan: FAIL"; grep -m8 -E 'Invalid|ERROR|Race|hazard|error' "$RAW/sanitizer.$tool.$plan.log" | tee -a "$MD"
        status=1
      fi
    done
  fi
fi

BW=0
if [ -n "${CHECK_BANDWIDTH_GBS:-}" ]; then
  # (the rehearsal on the stand-in driver, tests/cli/test_gpu_script.py: nothing there to measure)
  BW=$CHECK_BANDWIDTH_GBS
  say ""
  say "device read bandwidth: not measured; the bound below takes the given $BW GB/s (CHECK_BANDWIDTH_GBS)"
elif stage bandwidth 20; then
  # Read bandwidth, the bound's denominator: a sum over 4 GiB (reads every byte once, writes
  # nothing), and for reference a 4 GiB copy (bytes read + written over its time).
  limit 60 python3 - > "$RAW/bandwidth.txt" 2> "$RAW/bandwidth.log" <<'PY'
import torch
def timed(f, reps=10):
    for _ in range(3): f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / reps
import traceback
x = torch.randint(-2**31, 2**31 - 1, (1 << 30,), dtype=torch.int32, device="cuda")  # 4 GiB
y = torch.empty_like(x)
def probe(f, nbytes):  # GB/s, or 0 with the reason on stderr (one failing probe keeps the other)
    try:
        return nbytes / timed(f) / 1e9
    except Exception:
        traceback.print_exc()
        return 0.0
read = probe(lambda: x.sum(dtype=torch.int64), x.numel() * 4)
copy = probe(lambda: y.copy_(x), x.numel() * 4 * 2)
print(f"{read:.0f} {copy:.0f}")
PY
  read -r BW COPY < "$RAW/bandwidth.txt" || true
  BW=${BW:-0}
  say "device read bandwidth (torch.sum over 4 GiB of int32): $BW GB/s; a 4 GiB copy moves ${COPY:-?} GB/s (read + written)"
  if [ "${BW%.*}" -le 0 ] 2>/dev/null && [ "${COPY:-0}" -gt 0 ] 2>/dev/null; then
    # The bound then uses the copy's bytes (read + written) per second. A read-only pass may move
    # more, so that bound may be low and the percentages of it high: the results say so.
    BW=$COPY
    say "the read probe failed ($RAW/bandwidth.log); the bound below takes the copy's $BW GB/s, which may understate the read bandwidth (so the percentages may be high)"
  fi
  [ "${BW%.*}" -gt 0 ] 2>/dev/null || { say "no bandwidth measured ($RAW/bandwidth.log): no bound below"; tail -3 "$RAW/bandwidth.log" | tee -a "$MD"; }
fi

# bound PLAN: decode tok/s next to the bandwidth bound, from the bench JSON.
bound() {
  "$LLMRT" inspect "$B/plans/$1.fb" --json > "$RAW/$1.inspect.json" 2>/dev/null
  python3 - "$RAW/$1.inspect.json" "$RAW/$1.bench.json" "$BW" <<'PY' | tee -a "$MD"
import json, sys
ins, bench, bw = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
total = ins["tensors"]["bytes"]
vocab, hidden = ins["model"]["vocab_size"], ins["model"]["hidden_size"]
table = vocab * hidden * 2  # a decode step reads one row of the (bf16) embedding table, not all of it
per_token = total - table
prog = ins["program"]
# A quantize_q8 kernel per int8-activation GEMV, but for those whose input the step before wrote
# as int8 rows itself (one GEMV each: q/k/v and gate/up are fused); none for a rope_kv_store whose
# attention step does its work at decode (Step.rope_kernel), for a silu_mul whose gate|up GEMV does
# it (Step.silu_kernel) and, at batch 1, for an add_rms_norm the GEMV before it does (norm_kernel).
kernels = (prog['steps'] + prog.get('steps_with_int8_activation_gemv', 0) -
           prog.get('steps_writing_int8_activations', 0) - prog.get('steps_with_rope_kernel', 0) -
           prog.get('steps_with_silu_kernel', 0) - prog.get('steps_with_norm_kernel', 0) +
           int(prog.get('logits_summary_on_gpu', False)))
print(f"weights {total / 1e9:.2f} GB, read per decode step {per_token / 1e9:.2f} GB; kernels per batch-1 decode step: {kernels}")
for t in bench["tests"]:
    line = f"  {t['name']}: {t['tokens_per_s']:.1f} tok/s"
    if bw > 0 and t["kind"] == "tg":
        bound = bw * 1e9 / per_token
        line += f"; bound {bound:.1f} tok/s: {100 * t['tokens_per_s'] / bound:.1f}% of it"
    if bw > 0 and t["kind"] == "batch":
        steps = t["tokens_per_s"] / t["batch"]
        line += f" ({steps:.1f} steps/s, weights read at {steps * per_token / 1e9:.0f} GB/s)"
    print(line)
PY
}

if stage bench 90; then
  for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
    if limit 150 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp 512,2048 --tg 64 --batch 32 -r 2 \
        --json-out "$RAW/$plan.bench.json" > "$RAW/$plan.bench.txt" 2>&1; then
      say "$plan:"; fence "$RAW/$plan.bench.txt"; bound "$plan"
    else
      say "$plan: bench FAILED"; tail -5 "$RAW/$plan.bench.txt" | tee -a "$MD"; status=1
    fi
  done
fi

# GGUF's k-quant formats as held (Q4_K: int4-g256s32-f16-min, Q5_K: int5-g256s32-f16-min, Q3_K:
# int4-g256s16-f16-sym; sub-scales and int5 codes read by the GEMVs as they are) on the same
# shapes: batch-1 decode and its bound.
if stage kquant 90; then
  for plan in llama3_8b_q4k llama3_8b_q5k llama3_8b_q3k; do
    if limit 60 "$LLMRT" bench "$B/plans/$plan.fb" --device cuda --pp 0 --tg 64 --batch 0 -r 2 \
        --json-out "$RAW/$plan.bench.json" > "$RAW/$plan.bench.txt" 2>&1; then
      say "$plan:"; fence "$RAW/$plan.bench.txt"; bound "$plan"
    else
      say "$plan: bench FAILED"; tail -5 "$RAW/$plan.bench.txt" | tee -a "$MD"; status=1
    fi
  done
fi

if stage hf 80; then
  if python3 -c "import torch, transformers" 2>/dev/null; then
    limit 200 python3 "$B/hf_decode_bench.py" "$B/llama3_8b_config.json" --batch 1,32 --tokens 64 --modes eager \
      --json "$RAW/hf_eager.json" 2>&1 | grep -v Warning | tee -a "$MD" || say "transformers eager bench FAILED"
  else
    say "SKIPPED hf: PyTorch/transformers not installed"
  fi
fi

if stage hfcompiled 150; then
  if python3 -c "import torch, transformers" 2>/dev/null; then
    limit 240 python3 "$B/hf_decode_bench.py" "$B/llama3_8b_config.json" --batch 1,32 --tokens 64 --modes compiled \
      --json "$RAW/hf_compiled.json" 2>&1 | grep -v Warning | tail -4 | tee -a "$MD" || say "transformers compiled bench FAILED"
  else
    say "SKIPPED hfcompiled: PyTorch/transformers not installed"
  fi
fi

# A bench of one plan with extra flags, its table into the results.
bench_case() {  # TITLE PLAN SECONDS ARGS...
  local title=$1 plan=$2 t=$3
  shift 3
  say "$title"
  if limit "$t" "$LLMRT" bench "$B/plans/$plan.fb" --device cuda "$@" > "$RAW/$plan.$(echo "$*" | tr -c 'a-z0-9' _).txt" 2>&1
  then fence "$RAW/$plan.$(echo "$*" | tr -c 'a-z0-9' _).txt"
  else say "FAILED:"; tail -5 "$RAW/$plan.$(echo "$*" | tr -c 'a-z0-9' _).txt" | tee -a "$MD"; status=1
  fi
}

if stage profile 50; then
  for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
    bench_case "$plan, device time per kernel (CUDA events, launched one by one), prefill 512 and batch-1 decode:" \
      "$plan" 100 --pp "${PROFILE_PP:-512}" --tg 32 --batch 0 -r 1 --profile
  done
fi

if stage gemv 240; then
  for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
    bench_case "$plan, batch-1 decode with GEMVs that prefetch nothing before their wait (--gemv-l2-prefetch 0 plan; the bench above: 16 MiB):" \
      "${plan}_noprefetch" 100 --pp 0 --tg 64 --batch 0 -r 2
  done
  bench_case "int4-g128 decode with the GEMV over f32 activations (--quant-gemv f32 plan; the bench above: int8, dp4a):" \
    llama3_8b_int4_g128_f32gemv 100 --pp 0 --tg 64 --batch 8 -r 2
  bench_case "int4-g128 decode with a quantize_q8 kernel before every int8 GEMV (--no-fused-quantize; the bench above: norms and SiLU*mul write them):" \
    llama3_8b_int4_g128 100 --pp 0 --tg 64 --batch 8 -r 2 --no-fused-quantize
  bench_case "bf16 decode with each layer's rope_kv_store launched before its attention (--no-rope-in-attention; the bench above: inside it):" \
    llama3_8b_bf16 100 --pp 0 --tg 64 --batch 8 -r 2 --no-rope-in-attention
  for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
    bench_case "$plan, batch-1 decode with each layer's silu_mul launched after its gate|up GEMV (--no-silu-in-gemv; the bench above: inside it):" \
      "$plan" 100 --pp 0 --tg 64 --batch 0 -r 2 --no-silu-in-gemv
    bench_case "$plan, batch-1 decode with each add_rms_norm launched after its GEMV (--no-norm-in-gemv; the bench above: in the GEMV's last block):" \
      "$plan" 100 --pp 0 --tg 64 --batch 0 -r 2 --no-norm-in-gemv
  done
fi

if stage graphs 50; then
  for plan in llama3_8b_int4_g128 llama3_8b_bf16; do
    bench_case "$plan, batch-1 decode launched kernel by kernel (--no-cuda-graphs):" "$plan" 100 \
      --pp 0 --tg 64 --batch 0 -r 2 --no-cuda-graphs
    bench_case "$plan, batch-1 and batch-32 decode, each kernel after the previous one ends (--no-programmatic-launch):" \
      "$plan" 100 --pp 0 --tg 64 --batch 32 -r 2 --no-programmatic-launch
  done
fi

if stage sampling 60; then
  # Draws the logits summary cannot decide (temperature alone, top-p): on the device by the plan's
  # sampling kernel, and with --no-device-sampling copied back as rows and drawn on the host.
  for sampling in "--temperature 1" "--temperature 0.6 --top-p 0.9"; do
    for where in "" "--no-device-sampling"; do
      # shellcheck disable=SC2086  # the settings are separate flags
      bench_case "llama3_8b_int4_g128, batch-1 and batch-32 decode sampled ($sampling ${where:-on the device}; bench stage: greedy):" \
        llama3_8b_int4_g128 60 --pp 0 --tg 32 --batch 32 -r 1 $sampling $where
    done
  done
fi

if stage depth 40; then
  bench_case "int4-g128, batch-1 decode after a 3968-token prompt (attention split over blocks):" \
    llama3_8b_int4_g128 100 --pp 0 --tg 64 --batch 0 --depth 3968 -r 2
fi

if stage prefill 60; then
  bench_case "int4-g128 without tensor-core kernels (--no-tensor-cores plan: f32 CUDA-core GEMV, per-row attention):" \
    llama3_8b_int4_g128_notc 100 --pp 512,2048 --tg 0 --batch 0 -r 2
  bench_case "int4-g128 on the CUDA-core GEMV at every row count (--no-tensor-core-linear; tiled attention kept):" \
    llama3_8b_int4_g128 100 --pp 512,2048 --tg 32 --batch 16,32 -r 2 --no-tensor-core-linear
  bench_case "int4-g128, paged attention on the per-row kernel (--no-tiled-attention):" \
    llama3_8b_int4_g128 100 --pp 2048 --tg 0 --batch 0 -r 2 --no-tiled-attention
  bench_case "bf16 on the generated TF32 tensor-core GEMM instead of cuBLASLt (--no-gemm-library):" \
    llama3_8b_bf16 100 --pp 512,2048 --tg 32 --batch 32 -r 2 --no-gemm-library
  bench_case "int4-g128 on the generated GEMV / TF32 tiles instead of dequant_bf16 + cuBLASLt (--no-gemm-library):" \
    llama3_8b_int4_g128 100 --pp 512,2048 --tg 32 --batch 16,32 -r 2 --no-gemm-library
fi
finish
