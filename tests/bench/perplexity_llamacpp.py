#!/usr/bin/env python3
"""Perplexity of llama.cpp and of our runtime on the same GGUF, same tokens, same chunks, and the
KL divergence between them.

    tests/bench/perplexity_llamacpp.py [--model GGUF] [--plan PLAN] [--text FILE] [--ctx 512]
                                       [--chunks 8] [--threads 2] [--build build]
                                       [--cpu-kernels reference|fast] [--workdir DIR]
                                       [--json-out FILE]

1. llama.cpp (llama-cpp-python's low-level API, in a child process run by a Python that has it)
   tokenizes the whole text (BOS as the GGUF says), cuts it into chunks of --ctx tokens, replaces
   each chunk's first token with BOS when the vocabulary adds BOS, decodes each chunk from an empty
   KV cache with logits at positions ctx/2 .. ctx-2, and computes PPL = exp(mean NLL) as
   llama-perplexity does. It writes its token ids (int32 .npy) and the log-softmax of the scored
   positions (float16 .npy [chunks*(ctx-1-ctx/2), vocab], written chunk by chunk: about
   25 MB per chunk for a 49k vocabulary, hence --chunks).
2. `llmrt eval PLAN --token-ids ids.npy --kl-base logprobs.npy` evaluates our plan on exactly those
   tokens and chunks: our PPL, mean KL(P_llama.cpp || P_ours) and top-1 agreement.
3. `llmrt eval PLAN --perplexity TEXT --chunks 1` checks our own tokenization: token count.
The plan is compiled from the GGUF with llmc when --plan is not given and none exists.

llama.cpp comes from the PyPI package llama-cpp-python, built from source into a scratch virtual
environment exactly as tests/bench/compare_llamacpp.sh does (same pinned version, same directory,
so the two scripts share it; ISA flags set explicitly, AMX off). LLAMA_PY=/path/to/python uses a
Python that already has llama_cpp; LLAMA_VENV=DIR puts the scratch environment elsewhere.
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# Keep in step with tests/bench/compare_llamacpp.sh (the two share the environment).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
GGUF_VERSION = "0.19.0"
NUMPY_SPEC = "numpy>=1.26,<3"


def die(msg):
    print(f"perplexity_llamacpp: error: {msg}", file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The Python that has llama_cpp
# ---------------------------------------------------------------------------------------------

def ggml_cpu_flags():
    """ggml's CMake ISA flags from what this CPU reports (no -march=native), AMX always off."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    on = lambda f: "ON" if f in flags else "OFF"
    args = ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    args += [f"-DGGML_{f.upper()}={on(f)}" for f in ("avx", "avx2", "fma", "f16c", "bmi2")]
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        args += ["-DGGML_AVX512=ON", f"-DGGML_AVX512_VNNI={on('avx512_vnni')}",
                 f"-DGGML_AVX512_BF16={on('avx512_bf16')}", f"-DGGML_AVX512_VBMI={on('avx512vbmi')}"]
    else:
        args += ["-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AVX512_VBMI=OFF"]
    args.append(f"-DGGML_AVX_VNNI={on('avx_vnni')}")
    args += ["-DGGML_CUDA=OFF", "-DGGML_VULKAN=OFF", "-DGGML_METAL=OFF", "-DGGML_BLAS=OFF", "-DLLAMA_CURL=OFF"]
    return " ".join(args)


def python_ok(py):
    code = (f"import llama_cpp, numpy\nassert llama_cpp.__version__ == '{LLAMA_CPP_PYTHON_VERSION}', "
            "llama_cpp.__version__")
    return subprocess.run([py, "-c", code], capture_output=True).returncode == 0


def llama_python():
    """A Python with llama_cpp and numpy: LLAMA_PY, or the shared scratch venv (built if needed)."""
    if os.environ.get("LLAMA_PY"):
        py = os.environ["LLAMA_PY"]
        if subprocess.run([py, "-c", "import llama_cpp, numpy"], capture_output=True).returncode != 0:
            die(f"LLAMA_PY={py} cannot import llama_cpp and numpy")
        return py
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    venv = os.environ.get("LLAMA_VENV") or os.path.join(cache, "llmc", f"llamacpp-venv-{LLAMA_CPP_PYTHON_VERSION}")
    py = os.path.join(venv, "bin", "python")
    if os.access(py, os.X_OK) and python_ok(py):
        log(f"perplexity_llamacpp: reusing {venv}")
        return py
    if not shutil.which("cmake"):
        die("cmake is needed to build llama-cpp-python")
    cmake_args = ggml_cpu_flags()
    log(f"perplexity_llamacpp: installing llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} into {venv}")
    log(f"  CMAKE_ARGS={cmake_args}")
    log("  (built from source; several minutes on 2 cores)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", f"gguf=={GGUF_VERSION}", NUMPY_SPEC], check=True)
    env = dict(os.environ, CMAKE_ARGS=cmake_args)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    # --no-binary and --no-cache-dir: a wheel built earlier with other flags is never reused.
    rc = subprocess.run([py, "-m", "pip", "install", "--no-cache-dir", "--no-binary", "llama-cpp-python",
                         f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], env=env).returncode
    if rc != 0 or not python_ok(py):
        shutil.rmtree(venv, ignore_errors=True)
        die(f"pip could not build llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}")
    return py


# ---------------------------------------------------------------------------------------------
# llama.cpp side (child process, run by the llama Python)
# ---------------------------------------------------------------------------------------------

def cmd_llama(args):
    import numpy as np
    import llama_cpp as L

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def quiet(level, text, user):
        pass

    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(args.gguf.encode(), mp)
    if not model:
        die(f"llama.cpp could not load {args.gguf}")
    n_ctx = args.ctx
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = n_ctx
    cp.n_ubatch = n_ctx
    cp.n_seq_max = 1
    cp.n_threads = args.threads
    cp.n_threads_batch = args.threads
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        die("llama.cpp could not create a context")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    add_bos = bool(L.llama_vocab_get_add_bos(vocab))
    bos = L.llama_vocab_bos(vocab)

    # The whole text, add_special = true and parse_special = false (common_tokenize's defaults
    # in llama-perplexity).
    text = open(args.text, "rb").read()
    cap = len(text) + 16
    buf = (L.llama_token * cap)()
    n = L.llama_tokenize(vocab, text, len(text), buf, cap, True, False)
    if n < 0:
        die(f"llama_tokenize needs {-n} tokens, more than {cap}")
    tokens = np.array(buf[:n], dtype=np.int32)
    np.save(args.ids_out, tokens)

    first = n_ctx // 2
    scored = n_ctx - 1 - first
    n_chunks = len(tokens) // n_ctx
    if args.chunks > 0:
        n_chunks = min(n_chunks, args.chunks)
    if n_chunks < 1:
        die(f"the text has {len(tokens)} tokens, fewer than one chunk of {n_ctx}")
    out = np.lib.format.open_memmap(args.logprobs_out, mode="w+", dtype=np.float16,
                                    shape=(n_chunks * scored, n_vocab))
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(n_ctx, 0, 1)
    nll_sum = nll2_sum = 0.0
    count = 0
    running = []
    t0 = time.time()
    for c in range(n_chunks):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx].copy()
        if add_bos:
            chunk[0] = bos
        L.llama_memory_clear(mem, True)
        batch.n_tokens = n_ctx
        for i, t in enumerate(chunk):
            batch.token[i] = int(t)
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if first <= i <= n_ctx - 2 else 0
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            die(f"llama_decode returned {rc}")
        ptr = L.llama_get_logits(ctx)
        logits = np.ctypeslib.as_array(ptr, shape=(scored, n_vocab)).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        lp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        targets = tokens[c * n_ctx + first + 1:(c + 1) * n_ctx]
        nll = -lp[np.arange(scored), targets]
        nll_sum += nll.sum()
        nll2_sum += (nll * nll).sum()
        count += scored
        out[c * scored:(c + 1) * scored] = lp.astype(np.float16)
        running.append(float(np.exp(nll_sum / count)))
        print(f"[{c + 1}]{running[-1]:.4f},", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    out.flush()
    del out
    mean = nll_sum / count
    var = nll2_sum / count - mean * mean
    ppl = float(np.exp(mean))
    err = ppl * float(np.sqrt(var / (count - 1))) if var > 0 else 0.0
    L.llama_batch_free(batch)
    res = dict(ppl=ppl, ppl_error=err, tokens=int(len(tokens)), chunks=n_chunks, ctx=n_ctx,
               add_bos=add_bos, bos=int(bos), n_vocab=int(n_vocab), chunk_ppl=running,
               seconds=time.time() - t0, llama_cpp_python=L.__version__)
    with open(args.json_out, "w") as f:
        json.dump(res, f, indent=2)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def run_checked(cmd, what):
    log("+ " + " ".join(str(c) for c in cmd))
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        die(f"{what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def token_note(llama, own):
    """Flags a tokenization or BOS difference between llama.cpp and the plan's tokenizer."""
    note = "" if llama["tokens"] == own["tokens"] else "  (tokenizations differ!)"
    if llama["add_bos"] != (own["bos"] >= 0):
        note += f"  (BOS added: llama.cpp {llama['add_bos']}, plan {own['bos'] >= 0})"
    return note


def cmd_all(args):
    llmrt = os.path.join(args.build, "tools", "llmrt")
    if not os.access(llmrt, os.X_OK):
        die(f"no llmrt at {llmrt} (build it, or pass --build)")
    for path, what in ((args.model, "--model"), (args.text, "--text")):
        if not os.path.isfile(path):
            die(f"{what}: no file {path}")
    os.makedirs(args.workdir, exist_ok=True)
    plan = args.plan
    if not plan:
        plan = os.path.join(args.workdir, os.path.basename(args.model) + ".plan.fb")
        if not os.path.isfile(plan):
            llmc = os.path.join(args.build, "tools", "llmc")
            if not os.access(llmc, os.X_OK):
                die(f"no --plan given and no llmc at {llmc} to compile {args.model}")
            run_checked([llmc, "compile", args.model, "-o", plan, "--target", "none", "-q"], "llmc compile")
    elif not os.path.isfile(plan):
        die(f"--plan: no file {plan}")

    ids = os.path.join(args.workdir, "llamacpp_ids.npy")
    lp = os.path.join(args.workdir, "llamacpp_logprobs.npy")
    lj = os.path.join(args.workdir, "llamacpp.json")
    py = llama_python()
    log(f"perplexity_llamacpp: llama.cpp on {args.model}, ctx {args.ctx}, "
        f"{'all' if args.chunks == 0 else args.chunks} chunks, {args.threads} threads")
    rc = subprocess.run([py, os.path.abspath(__file__), "llama", args.model, "--text", args.text, "--ctx",
                         str(args.ctx), "--chunks", str(args.chunks), "--threads", str(args.threads),
                         "--ids-out", ids, "--logprobs-out", lp, "--json-out", lj]).returncode
    if rc != 0:
        die("the llama.cpp run failed")
    llama = json.load(open(lj))

    bos = str(llama["bos"]) if llama["add_bos"] else "none"
    common = ["--ctx", args.ctx, "--threads", args.threads, "--json"]
    if args.cpu_kernels:
        common += ["--cpu-kernels", args.cpu_kernels]
    ours = json.loads(run_checked([llmrt, "eval", plan, "--token-ids", ids, "--kl-base", lp, "--bos", bos,
                                   "--chunks", args.chunks, *common], "llmrt eval --kl-base").stdout)
    own = json.loads(run_checked([llmrt, "eval", plan, "--perplexity", args.text, "--chunks", 1, *common],
                                 "llmrt eval --perplexity").stdout)

    kl = ours["kl"]
    rows = [
        ("llama.cpp PPL", f"{llama['ppl']:.4f} ± {llama['ppl_error']:.4f}"),
        ("llmrt PPL", f"{ours['ppl']:.4f} ± {ours['ppl_error']:.4f}"),
        ("ratio llmrt / llama.cpp", f"{ours['ppl'] / llama['ppl']:.5f}"),
        ("mean KL(llama.cpp || llmrt)", f"{kl['mean']:.6f} ± {kl['error']:.6f} (max {kl['max']:.4f})"),
        ("top-1 agreement", f"{kl['same_top_pct']:.3f} ± {kl['same_top_error_pct']:.3f} %"),
        ("llama.cpp PPL from its f16 file", f"{kl['ppl_base']:.4f}"),
        ("chunks x scored positions", f"{ours['chunks']} x {ours['scored_positions'] // max(ours['chunks'], 1)}"),
        ("tokens llama.cpp / llmrt", f"{llama['tokens']} / {own['tokens']}" + token_note(llama, own)),
        ("seconds llama.cpp / llmrt", f"{llama['seconds']:.1f} / {ours['seconds']:.1f}"),
    ]
    print(f"\nperplexity on {os.path.basename(args.text)}: {os.path.basename(args.model)} "
          f"(plan {os.path.basename(plan)}, {ours.get('cpu_kernels', '?')} kernels), ctx {args.ctx}, "
          f"{args.threads} threads, BOS {bos}")
    w = max(len(r[0]) for r in rows)
    print(f"| {'figure'.ljust(w)} | value |")
    print(f"|{'-' * (w + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(w)} | {value} |")
    res = dict(model=args.model, plan=plan, text=args.text, ctx=args.ctx, threads=args.threads,
               llama_cpp=llama, llmrt=ours, llmrt_own_tokens=own["tokens"])
    out = args.json_out or os.path.join(args.workdir, "perplexity.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"perplexity_llamacpp: wrote {out}")


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
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("all", "llama"):
        argv = ["all"] + argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="llama.cpp and llmrt, then the table (the default)")
    a.add_argument("--build", default=os.path.join(ROOT, "build"), help="build dir holding tools/llmrt (and llmc)")
    a.add_argument("--model", default=os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a.add_argument("--plan", help="our plan of --model (default: compiled into the work dir)")
    a.add_argument("--text", default=os.path.join(ROOT, "tests", "fixtures", "eval", "jargon_excerpt.txt"))
    a.add_argument("--ctx", type=positive, default=512)
    a.add_argument("--chunks", type=nonneg, default=8, help="chunks to evaluate (0: all; ~25 MB of f16 each)")
    a.add_argument("--threads", type=positive, default=2)
    a.add_argument("--cpu-kernels", choices=("reference", "fast"), help="llmrt eval --cpu-kernels (default: the plan's)")
    a.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "llmc-perplexity-llamacpp"))
    a.add_argument("--json-out", help="results file (default: WORKDIR/perplexity.json)")
    l = sub.add_parser("llama", help="llama.cpp's perplexity, token ids and log-probabilities (child)")
    l.add_argument("gguf")
    l.add_argument("--text", required=True)
    l.add_argument("--ctx", type=positive, default=512)
    l.add_argument("--chunks", type=nonneg, default=8)
    l.add_argument("--threads", type=positive, default=2)
    l.add_argument("--ids-out", required=True)
    l.add_argument("--logprobs-out", required=True)
    l.add_argument("--json-out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "llama":
        cmd_llama(args)
    else:
        cmd_all(args)


if __name__ == "__main__":
    main()
