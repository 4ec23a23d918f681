"""tools/gpu helpers that run without a GPU: sass_loops.py (the README's SASS instruction counts)."""

import importlib.util
import sys

from conftest import REPO, run

SASS = REPO / "tools" / "gpu" / "sass_loops.py"

# nvdisasm -c output in its layout (function label, loop labels, /*address*/ instructions).
LISTING = """\
.text.llm_demo:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   STL [R1], R4 ;
        /*0030*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0040*/                   ISETP.GE.AND P0, PT, R0, 0x20, PT ;
        /*0050*/              @!P0 BRA `(.L_x_1) ;
        /*0060*/                   BRA `(.L_x_2) ;
.L_x_2:
        /*0070*/                   LDL R4, [R1] ;
        /*0080*/                   EXIT ;
"""


def load():
    spec = importlib.util.spec_from_file_location("sass_loops", SASS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sass_loops_counts_backward_branches_only():
    loops = load().parse(LISTING)
    # .L_x_1 .. its branch: 5 instructions, one of them a local store; the forward BRA is no loop.
    assert [(f, label, len(body)) for f, label, body in loops] == [("llm_demo", "L_x_1", 5)]
    assert sum("STL" in x for x in loops[0][2]) == 1


def test_sass_loops_without_nvdisasm_says_so(tmp_path):
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF")
    proc = run([sys.executable, SASS, cubin, "--nvdisasm", tmp_path / "no-such-nvdisasm"])
    assert proc.returncode == 2
    assert "nvdisasm failed" in proc.stderr
