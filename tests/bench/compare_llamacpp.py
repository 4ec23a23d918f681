#!/usr/bin/env python3
"""Side-by-side CPU speed of our runtime (`llmrt bench`) and llama.cpp (llama-cpp-python's
low-level API) on the same GGUF, same thread count, same machine, in one run.

Run through tests/bench/compare_llamacpp.sh, which provides a Python with a pinned
llama-cpp-python and `gguf`. Subcommands (the script calls `all`):

  all          SmolLM2 Q4_1 (and with --with-1b a Llama-3.2-1B-shaped random Q4_1 GGUF):
               compile each with llmc, run `llmrt bench --pp P --tg G`, measure llama.cpp,
               measure memory read bandwidth, print the table, write JSON.
  llama        measure llama.cpp on one GGUF (run in a child process by `all`).
  make-1b      write the Llama-3.2-1B-shaped GGUF with random Q4_1 weights (--requantize MIX:
               that file quantized again by llama.cpp, llama_model_quantize with allow_requantize,
               to one of its mixes, e.g. q2_k; the k-quants need rows of 256).
  bandwidth    memory read bandwidth (tests/bench/read_bandwidth.c, compiled on the fly).

llama.cpp figures come from its own perf counters, llama_perf_context(ctx): t_p_eval_ms/n_p_eval
for ppP (one llama_decode of a P-token batch) and t_eval_ms/n_eval for tgG (G single-token
llama_decode calls at positions 0..G-1), random token ids, KV cleared and counters reset before
each repetition, one untimed warm-up. Ours come from `llmrt bench` (wall clock of
Generator::generate, which includes sampling: a slight handicap for us).
"""
import argparse
import ctypes
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# Llama-3.2-1B's shape (config.json of meta-llama/Llama-3.2-1B); tied embeddings.
LLAMA_1B = dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                rope_theta=500000.0, eps=1e-5, context=2048)
Q4_1_BLOCK, Q4_1_BYTES = 32, 20  # 32 weights: f16 scale d, f16 min m, 16 bytes of nibbles


def die(msg):
    print(f"compare_llamacpp: error: {msg}", file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# llama.cpp measurement
# ---------------------------------------------------------------------------------------------

def measure_llama(model_path, threads, pp, tg, reps, seed):
    import llama_cpp as L

    # Silence llama.cpp's loader log (it goes to stderr line by line otherwise).
    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def quiet(level, text, user):
        pass

    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(model_path.encode(), mp)
    if not model:
        die(f"llama.cpp could not load {model_path}")
    cp = L.llama_context_default_params()
    n = max(pp, tg, 1)
    cp.n_ctx = max(n + 16, 256)
    cp.n_batch = max(pp, 1)
    cp.n_ubatch = max(pp, 1)
    cp.n_seq_max = 1
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.no_perf = False
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        die("llama.cpp could not create a context")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    mem = L.llama_get_memory(ctx)
    rng = random.Random(seed)
    batch = L.llama_batch_init(max(pp, 1), 0, 1)

    def fill(tokens, pos0, logits_last):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if (logits_last and i == len(tokens) - 1) else 0

    def decode(tokens, pos0):
        fill(tokens, pos0, True)
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            die(f"llama_decode returned {rc}")
        L.llama_synchronize(ctx)  # the perf counters are updated here

    def run_pp(p):
        L.llama_memory_clear(mem, True)
        L.llama_perf_context_reset(ctx)
        decode([rng.randrange(n_vocab) for _ in range(p)], 0)
        d = L.llama_perf_context(ctx)
        if d.n_p_eval != p:
            die(f"llama.cpp counted {d.n_p_eval} prompt tokens, expected {p}")
        return d.n_p_eval / (d.t_p_eval_ms / 1e3), d.t_p_eval_ms

    def run_tg(g):
        L.llama_memory_clear(mem, True)
        L.llama_perf_context_reset(ctx)
        for i in range(g):
            decode([rng.randrange(n_vocab)], i)
        d = L.llama_perf_context(ctx)
        if d.n_eval != g:
            die(f"llama.cpp counted {d.n_eval} single-token decodes, expected {g}")
        return d.n_eval / (d.t_eval_ms / 1e3), d.t_eval_ms

    tests = []
    for name, fn, count in ((f"pp{pp}", run_pp, pp), (f"tg{tg}", run_tg, tg)):
        if count <= 0:
            continue
        fn(min(count, 16) if fn is run_tg else count)  # warm-up
        samples, ms = [], []
        for _ in range(reps):
            tps, t = fn(count)
            samples.append(tps)
            ms.append(t)
        tests.append(dict(name=name, tokens=count, tokens_per_s=statistics.mean(samples),
                          stddev=statistics.stdev(samples) if len(samples) > 1 else 0.0,
                          samples=samples, perf_ms=ms))
    info = dict(
        llama_cpp_python=L.__version__,
        system_info=L.llama_print_system_info().decode(errors="replace").strip(),
        model_bytes=L.llama_model_size(model),
        n_params=L.llama_model_n_params(model),
        n_ctx=cp.n_ctx, n_batch=cp.n_batch, n_ubatch=cp.n_ubatch,
        flash_attn_type=int(cp.flash_attn_type), threads=threads, repetitions=reps, tests=tests)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    L.llama_backend_free()
    return info


# ---------------------------------------------------------------------------------------------
# Random Llama-3.2-1B-shaped GGUF
# ---------------------------------------------------------------------------------------------

def read_tokenizer(gguf_path):
    """tokenizer.ggml.* of a GGUF (SmolLM2's), as Python values."""
    import gguf
    r = gguf.GGUFReader(gguf_path)
    out = {}
    for name, field in r.fields.items():
        if not name.startswith("tokenizer.ggml."):
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            vals = [field.parts[i] for i in field.data]
            if sub == gguf.GGUFValueType.STRING:
                out[name] = (sub, [bytes(v).decode("utf-8", errors="replace") for v in vals])
            else:
                out[name] = (sub, [v.tolist()[0] for v in vals])
        elif t == gguf.GGUFValueType.STRING:
            out[name] = (t, bytes(field.parts[field.data[0]]).decode())
        else:
            out[name] = (t, field.parts[field.data[0]].tolist()[0])
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        if key not in out:
            die(f"{gguf_path} has no {key}; cannot borrow its tokenizer")
    return out


def random_q4_1(rng, rows, cols):
    """Raw Q4_1 blocks for a rows x cols matrix: small scales, values centred on 0."""
    import numpy as np
    if cols % Q4_1_BLOCK:
        die(f"{cols} columns are not a multiple of {Q4_1_BLOCK}")
    nb = cols // Q4_1_BLOCK
    blocks = rng.integers(0, 256, size=(rows, nb, Q4_1_BYTES), dtype=np.uint8)
    d = np.float16(0.004)
    head = np.array([d, np.float16(-8 * float(d))], dtype="<f2").view(np.uint8)
    blocks[:, :, 0:4] = head
    return blocks.reshape(rows, nb * Q4_1_BYTES)


def make_1b(out_path, tokenizer_from, seed=1):
    import gguf
    import numpy as np
    s = LLAMA_1B
    tok = read_tokenizer(tokenizer_from)
    tokens = list(tok["tokenizer.ggml.tokens"][1])
    types = list(tok.get("tokenizer.ggml.token_type", (None, [1] * len(tokens)))[1])
    if len(tokens) > s["vocab"]:
        die(f"the borrowed vocabulary has {len(tokens)} tokens, more than {s['vocab']}")
    # Pad to Llama 3's vocabulary size with unused placeholder tokens (type 5: UNUSED).
    for i in range(len(tokens), s["vocab"]):
        tokens.append(f"<|reserved_{i}|>")
        types.append(5)
    rng = np.random.default_rng(seed)
    tmp = out_path + ".part"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name("Llama-3.2-1B-shaped random Q4_1")
    w.add_context_length(s["context"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_vocab_size(s["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_tokenizer_model(tok["tokenizer.ggml.model"][1])
    if "tokenizer.ggml.pre" in tok:
        w.add_tokenizer_pre(tok["tokenizer.ggml.pre"][1])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(tok["tokenizer.ggml.merges"][1])
    for key, setter in (("tokenizer.ggml.bos_token_id", w.add_bos_token_id),
                        ("tokenizer.ggml.eos_token_id", w.add_eos_token_id),
                        ("tokenizer.ggml.padding_token_id", w.add_pad_token_id)):
        if key in tok:
            setter(int(tok[key][1]))
    H, F, D = s["hidden"], s["ffn"], s["hidden"] // s["heads"]
    kv = s["kv_heads"] * D
    norm = np.ones(H, dtype=np.float32)
    q41 = gguf.GGMLQuantizationType.Q4_1
    w.add_tensor("token_embd.weight", random_q4_1(rng, s["vocab"], H), raw_dtype=q41)
    w.add_tensor("output_norm.weight", norm)
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm)
        w.add_tensor(p + "ffn_norm.weight", norm)
        for name, rows, cols in (("attn_q", H, H), ("attn_k", kv, H), ("attn_v", kv, H),
                                 ("attn_output", H, H), ("ffn_gate", F, H), ("ffn_up", F, H),
                                 ("ffn_down", H, F)):
            w.add_tensor(p + name + ".weight", random_q4_1(rng, rows, cols), raw_dtype=q41)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


# llama.cpp's llama_ftype values (llama.h) of the mixes make-1b --requantize writes.
REQUANT_FTYPES = {"q2_k": 10, "q3_k_m": 12, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "iq4_xs": 30}


def requantize(src, dst, ftype):
    """llama.cpp's own quantization of src (any GGUF it reads) to the mix `ftype`."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = os.cpu_count() or 1
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        die(f"llama_model_quantize({dst}) failed: {rc}")


def gguf_weight_bytes(path):
    """Bytes of all tensors of a GGUF: every weight read once per token (a tied lm_head is the
    embedding table, counted once)."""
    import gguf
    r = gguf.GGUFReader(path)
    return int(sum(int(t.n_bytes) for t in r.tensors)), len(r.tensors)


# ---------------------------------------------------------------------------------------------
# Memory bandwidth
# ---------------------------------------------------------------------------------------------

def measure_bandwidth(threads, workdir, mib=1024, reps=5):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        die("no C compiler (cc) to build the bandwidth kernel")
    exe = os.path.join(workdir, "read_bandwidth")
    src = os.path.join(HERE, "read_bandwidth.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run([cc, "-O3", "-march=native", "-pthread", src, "-o", exe], check=True)
    out = subprocess.run([exe, str(threads), str(mib), str(reps)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


# ---------------------------------------------------------------------------------------------
# Our side
# ---------------------------------------------------------------------------------------------

def run_checked(cmd, what):
    log("+ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"{what} failed (exit {p.returncode}):\n{p.stderr.strip()}")
    return p.stdout


def compile_plan(llmc, gguf_path, plan_path):
    if os.path.exists(plan_path) and os.path.getmtime(plan_path) >= os.path.getmtime(gguf_path) \
            and os.path.getmtime(plan_path) >= os.path.getmtime(llmc):
        log(f"reusing {plan_path}")
    else:
        run_checked([llmc, "compile", gguf_path, "-o", plan_path, "--target", "none", "-q"],
                    "llmc compile")
    info = json.loads(run_checked([llmc, "inspect", plan_path, "--json"], "llmc inspect"))
    return info


def bench_ours(llmrt, plan, threads, pp, tg, reps, json_path):
    run_checked([llmrt, "bench", plan, "--threads", str(threads), "--pp", str(pp), "--tg", str(tg),
                 "--batch", "0", "-r", str(reps), "--json-out", json_path], "llmrt bench")
    with open(json_path) as f:
        return json.load(f)


def bench_llama(python, gguf_path, threads, pp, tg, reps, json_path):
    run_checked([python, os.path.abspath(__file__), "llama", gguf_path, "--threads", str(threads),
                 "--pp", str(pp), "--tg", str(tg), "-r", str(reps), "--json-out", json_path],
                "llama.cpp measurement")
    with open(json_path) as f:
        return json.load(f)


def figure(results, name):
    for t in results["tests"]:
        if t["name"] == name:
            return t["tokens_per_s"], t["stddev"]
    return None, None


def compare_model(args, label, gguf_path, work):
    stem = os.path.splitext(os.path.basename(gguf_path))[0]
    plan = os.path.join(work, stem + ".plan.fb")
    log(f"== {label}: {gguf_path}")
    info = compile_plan(args.llmc, gguf_path, plan)
    ours = bench_ours(args.llmrt, plan, args.threads, args.pp, args.tg, args.repetitions,
                      os.path.join(work, stem + ".llmrt.json"))
    theirs = bench_llama(sys.executable, gguf_path, args.threads, args.pp, args.tg,
                         args.repetitions, os.path.join(work, stem + ".llamacpp.json"))
    gguf_bytes, n_tensors = gguf_weight_bytes(gguf_path)
    rows = []
    for name in (f"pp{args.pp}", f"tg{args.tg}"):
        o, os_ = figure(ours, name)
        t, ts = figure(theirs, name)
        if o is None or t is None:
            continue
        rows.append(dict(test=name, ours=o, ours_stddev=os_, llama_cpp=t, llama_cpp_stddev=ts,
                         ratio=o / t if t else None))
    return dict(label=label, gguf=gguf_path, gguf_weight_bytes=gguf_bytes, gguf_tensors=n_tensors,
                plan=plan, plan_weight_bytes=info.get("tensors", {}).get("bytes"),
                plan_bytes_by_dtype=info.get("tensors", {}).get("bytes_by_dtype"),
                rows=rows, llmrt=ours, llama_cpp=theirs)


def print_report(res, args):
    ours_isa = next((m["llmrt"].get("isa") for m in res["models"]), "?")
    lc = res["models"][0]["llama_cpp"] if res["models"] else {}
    print()
    print(f"llmrt vs llama.cpp, {args.threads} thread(s), {platform.machine()} "
          f"({res['cpu_model']}); llmrt ISA {ours_isa}; llama-cpp-python "
          f"{lc.get('llama_cpp_python', '?')} [{lc.get('system_info', '')}]")
    print(f"tokens/s, mean ± stddev of {args.repetitions} run(s); ratio = ours / llama.cpp "
          f"(> 1: we are faster)")
    print(f"| {'model':<24} | {'test':<6} | {'llmrt t/s':>17} | {'llama.cpp t/s':>17} | {'ratio':>6} |")
    print(f"|{'-' * 26}|{'-' * 8}|{'-' * 19}|{'-' * 19}|{'-' * 8}|")
    for m in res["models"]:
        for r in m["rows"]:
            if args.repetitions > 1:
                o = f"{r['ours']:.2f} ± {r['ours_stddev']:.2f}"
                t = f"{r['llama_cpp']:.2f} ± {r['llama_cpp_stddev']:.2f}"
            else:  # one run: no spread to show
                o, t = f"{r['ours']:.2f}", f"{r['llama_cpp']:.2f}"
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "n/a"
            # "±" is 2 bytes but one column: pad by characters, which f-strings do.
            print(f"| {m['label']:<24} | {r['test']:<6} | {o:>17} | {t:>17} | {ratio:>6} |")
    bw = res.get("bandwidth")
    if bw:
        print(f"memory read bandwidth ({bw['threads']} threads, {bw['bytes'] >> 20} MiB, best of "
              f"{bw['repetitions']}): {bw['best_gb_per_s']:.2f} GB/s (mean {bw['mean_gb_per_s']:.2f})")
    for m in res["models"]:
        if "roofline" not in m:
            continue
        rf = m["roofline"]
        print(f"{m['label']}: weights read per token {rf['gguf_weight_bytes'] / 1e9:.3f} GB (Q4_1 "
              f"GGUF, tied lm_head once) -> batch-1 decode limit {rf['limit_tok_s']:.2f} tok/s")
        for who in ("llama_cpp", "ours"):
            if who in rf:
                e = rf[who]
                print(f"  {who.replace('_', '.') if who == 'llama_cpp' else 'llmrt':<9}: "
                      f"{e['tok_s']:.2f} tok/s x {rf['gguf_weight_bytes'] / 1e9:.3f} GB = "
                      f"{e['gb_s']:.2f} GB/s = {100 * e['fraction']:.1f}% of measured bandwidth")
        if "ours_plan" in rf and abs(rf["plan_weight_bytes"] - rf["gguf_weight_bytes"]) > 0.01 * rf["gguf_weight_bytes"]:
            e = rf["ours_plan"]
            print(f"  llmrt streams its plan's {rf['plan_weight_bytes'] / 1e9:.3f} GB per token: "
                  f"{e['gb_s']:.2f} GB/s = {100 * e['fraction']:.1f}% of bandwidth")
    for m in res["models"]:
        pb, gb = m.get("plan_weight_bytes"), m["gguf_weight_bytes"]
        if pb and gb:
            print(f"note: {m['label']}: the plan's weights are {pb / 2**20:.1f} MiB vs "
                  f"{gb / 2**20:.1f} MiB in the GGUF ({pb / gb:.2f}x; Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL blocks "
                  f"are kept as they are, Q4_K/Q5_K/Q6_K/IQ4_XS with sub-scales a byte each, Q2_K/Q3_K wider (int4 codes); llmrt's "
                  f"kernels: {m['llmrt'].get('cpu_kernels', '?')}).")
    if res["load_average_at_start"] > 0.5:
        print(f"warning: load average was {res['load_average_at_start']:.2f} at the start: the CPUs "
              f"were shared, so these figures understate both engines")
    print(f"results: {args.json_out}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def cmd_all(args):
    for tool in (args.llmc, args.llmrt):
        if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
            die(f"{tool} is not an executable (build the project, or pass --build DIR)")
    if not os.path.isfile(args.model):
        die(f"{args.model} does not exist (tools/setup.sh fetches it)")
    work = args.workdir
    os.makedirs(work, exist_ok=True)
    load = os.getloadavg()[0]
    if load > 0.5:
        log(f"warning: load average {load:.2f}: other work shares the CPUs, figures will be low and "
            f"noisy (llama.cpp's spinning thread barrier suffers most when cores are taken)")
    res = dict(threads=args.threads, pp=args.pp, tg=args.tg, repetitions=args.repetitions,
               cpu_model=cpu_model(), load_average_at_start=load, time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), models=[],
               note="llmrt keeps the GGUF's quantized blocks (Q5_0 ... Q6_K widened); plans use the fast "
                    "contract (int8 activations)")
    label = ("SmolLM2-135M Q4_1" if args.model == default_model()
             else os.path.splitext(os.path.basename(args.model))[0][:24])
    res["models"].append(compare_model(args, label, args.model, work))
    if args.with_1b:
        big = args.model_1b or os.path.join(work, "llama-3.2-1b-shaped-random.Q4_1.gguf")
        if not os.path.exists(big):
            log(f"writing {big} (random Q4_1 weights)")
            t0 = time.time()
            make_1b(big, args.model)
            log(f"  {os.path.getsize(big) / 1e9:.2f} GB in {time.time() - t0:.0f} s")
        log("measuring memory read bandwidth")
        res["bandwidth"] = measure_bandwidth(args.threads, work)
        m = compare_model(args, "Llama-3.2-1B-shape Q4_1", big, work)
        bw = res["bandwidth"]["best_gb_per_s"] * 1e9
        gb = m["gguf_weight_bytes"]
        rf = dict(gguf_weight_bytes=gb, plan_weight_bytes=m["plan_weight_bytes"],
                  bandwidth_bytes_per_s=bw, limit_tok_s=bw / gb)
        o, _ = figure(m["llmrt"], f"tg{args.tg}")
        t, _ = figure(m["llama_cpp"], f"tg{args.tg}")
        if t:
            rf["llama_cpp"] = dict(tok_s=t, gb_s=t * gb / 1e9, fraction=t * gb / bw)
        if o:
            rf["ours"] = dict(tok_s=o, gb_s=o * gb / 1e9, fraction=o * gb / bw)
            if m["plan_weight_bytes"]:
                pb = m["plan_weight_bytes"]
                rf["ours_plan"] = dict(tok_s=o, gb_s=o * pb / 1e9, fraction=o * pb / bw)
        m["roofline"] = rf
        res["models"].append(m)
    with open(args.json_out, "w") as f:
        json.dump(res, f, indent=2)
    print_report(res, args)


def default_model():
    return os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return v


def nonneg(text):
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("all", help="the whole comparison")
    a.add_argument("--build", default=os.path.join(ROOT, "build"), help="build dir holding tools/llmc and tools/llmrt")
    a.add_argument("--model", default=default_model())
    a.add_argument("--with-1b", action="store_true", help="also the Llama-3.2-1B-shaped random Q4_1 model")
    a.add_argument("--model-1b", help="path of the 1B GGUF (default: in the work dir; written there when absent)")
    a.add_argument("--threads", type=positive, default=2)
    a.add_argument("--pp", type=nonneg, default=512)
    a.add_argument("--tg", type=nonneg, default=128)
    a.add_argument("-r", "--repetitions", type=positive, default=3)
    a.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "llmc-compare-llamacpp"))
    a.add_argument("--json-out", help="results file (default: WORKDIR/compare.json)")

    l = sub.add_parser("llama", help="measure llama.cpp on one GGUF")
    l.add_argument("gguf")
    l.add_argument("--threads", type=positive, default=2)
    l.add_argument("--pp", type=nonneg, default=512)
    l.add_argument("--tg", type=nonneg, default=128)
    l.add_argument("-r", "--repetitions", type=positive, default=3)
    l.add_argument("--seed", type=int, default=1234)
    l.add_argument("--json-out")

    m = sub.add_parser("make-1b", help="write the Llama-3.2-1B-shaped random Q4_1 GGUF")
    m.add_argument("out")
    m.add_argument("--tokenizer-from", default=os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    m.add_argument("--requantize", choices=sorted(REQUANT_FTYPES), help="llama.cpp's mix to requantize it to")

    b = sub.add_parser("bandwidth", help="memory read bandwidth")
    b.add_argument("--threads", type=positive, default=2)
    b.add_argument("--mib", type=positive, default=1024)
    b.add_argument("-r", "--repetitions", type=positive, default=5)

    args = ap.parse_args()
    if args.cmd == "all":
        if args.pp == 0 and args.tg == 0:
            die("nothing to measure: --pp and --tg are both 0")
        args.llmc = os.path.join(args.build, "tools", "llmc")
        args.llmrt = os.path.join(args.build, "tools", "llmrt")
        args.workdir = os.path.abspath(args.workdir)
        args.json_out = args.json_out or os.path.join(args.workdir, "compare.json")
        args.model = os.path.abspath(args.model)
        cmd_all(args)
    elif args.cmd == "llama":
        if not os.path.isfile(args.gguf):
            die(f"{args.gguf} does not exist")
        info = measure_llama(os.path.abspath(args.gguf), args.threads, args.pp, args.tg,
                             args.repetitions, args.seed)
        text = json.dumps(info, indent=2)
        if args.json_out:
            with open(args.json_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    elif args.cmd == "make-1b":
        if not os.path.isfile(args.tokenizer_from):
            die(f"{args.tokenizer_from} does not exist")
        out = os.path.abspath(args.out)
        if args.requantize:
            q41 = out + ".q4_1.part"
            make_1b(q41, args.tokenizer_from)
            try:
                requantize(q41, out, REQUANT_FTYPES[args.requantize])
            finally:
                os.remove(q41)
        else:
            make_1b(out, args.tokenizer_from)
        print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e9:.3f} GB")
    elif args.cmd == "bandwidth":
        with tempfile.TemporaryDirectory() as d:
            print(json.dumps(measure_bandwidth(args.threads, d, args.mib, args.repetitions)))


if __name__ == "__main__":
    main()
