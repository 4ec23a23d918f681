"""Instructions per loop in a kernel image's SASS: the figures the README quotes for the GEMVs.

    sass_loops.py KERNEL.cubin [--nvdisasm PATH] [--show LABEL]

Disassembles the CUBIN with nvdisasm (not part of the build or of CI: `pip download --no-deps
nvidia-cuda-nvdisasm`, unzip the wheel, use nvidia/cu*/bin/nvdisasm; or a CUDA toolkit's), then
lists every loop: a backward branch and the instructions from its target label to it, the count,
and how many of them touch local memory (LDL/STL: spills). A loop of the quantized GEMV's span
loop takes kStages spans per iteration (LinearKernel.cpp), so its count over kStages is the
instructions per span; a kernel's 1- to 4-token paths are separate loops. --show prints a loop's
instructions. Kernel images come from `llmc inspect PLAN --extract-kernels DIR`.
"""
import argparse
import re
import shutil
import subprocess
import sys


def parse(text):
    """[(function, label, [instructions])] for every backward branch, in program order."""
    labels, instrs, func = {}, [], ""
    for line in text.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            func = m.group(1)
            continue
        m = re.match(r"^\.(L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            instrs.append((func, m.group(1)))
    loops = []
    for i, (f, ins) in enumerate(instrs):
        m = re.search(r"\bBRA\b.*?`?\(?\.(L_x_\d+)", ins)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            loops.append((f, m.group(1), [x for _, x in instrs[labels[m.group(1)]:i + 1]]))
    return loops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    ap.add_argument("--show", help="print the instructions of the loop ending at this label (L_x_N)")
    a = ap.parse_args()
    try:
        text = subprocess.run([a.nvdisasm, "-c", a.cubin], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"sass_loops: nvdisasm failed ({e}); pass --nvdisasm PATH", file=sys.stderr)
        return 2
    loops = parse(text)
    if not loops:
        print("no loops (fully unrolled, or not a kernel image)")
    for f, label, body in loops:
        local = sum(1 for x in body if re.search(r"\b(LDL|STL)\b", x))
        print(f"{f}  {label}: {len(body)} instructions, {local} local-memory")
        if a.show == label:
            for x in body:
                print("    " + x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
