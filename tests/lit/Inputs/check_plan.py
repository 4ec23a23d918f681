#!/usr/bin/env python3
"""Independent checker for the output of --llm-plan-memory.

Usage: check_plan.py [@func] < printed.mlir   (default: the whole input)

Reads printed IR on stdin and checks, from the text alone:
  * every op result that needs a slot (all llm ops except weight,
    weight_concat and kv_store) carries llm.arena_offsets, one per result;
  * offsets are multiples of 64;
  * no two values that are live at the same time overlap, where a value is
    live from its defining op through its last user (inclusive): so an op's
    outputs never overlap its inputs or each other;
  * llm.arena_bytes_per_token covers every slot and equals the high-water mark.
Prints "PLAN OK <bytes>" or the first problem (exit 1).
"""
import re
import sys

NO_SLOT = ("llm.weight ", "llm.weight_concat ", "llm.kv_store ")


def result_names(lhs):
    names = []
    for part in lhs.split(","):
        part = part.strip()
        m = re.fullmatch(r"(%[\w.$-]+)(?::(\d+))?", part)
        if not m:
            sys.exit("cannot parse results: " + lhs)
        if m.group(2):
            names += ["%s#%d" % (m.group(1), i) for i in range(int(m.group(2)))]
        else:
            names.append(m.group(1))
    return names


def result_widths(line):
    types = line.rsplit(" : ", 1)[1]
    if "->" in types:
        types = types.rsplit("->", 1)[1]
    widths = []
    for m in re.finditer(r"tensor<([^>]*)>", types):
        dims = m.group(1).split("x")[:-1]
        width = 1
        for d in dims[1:]:
            width *= int(d)
        widths.append(width * 4)
    return widths


def function_text(text, name):
    """The lines of `func.func @name` (the whole input if name is None)."""
    if name is None:
        return text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*func.func (\w+ )?%s\(" % re.escape(name), line):
            indent = len(line) - len(line.lstrip())
            for j in range(i + 1, len(lines)):
                if lines[j].strip() == "}" and len(lines[j]) - len(lines[j].lstrip()) == indent:
                    return "\n".join(lines[i:j + 1])
    sys.exit("function %s not found" % name)


def main():
    text = function_text(sys.stdin.read(), sys.argv[1] if len(sys.argv) > 1 else None)
    m = re.search(r"llm.arena_bytes_per_token = (\d+)", text)
    if not m:
        sys.exit("no llm.arena_bytes_per_token")
    arena = int(m.group(1))
    ops = [l.strip() for l in text.splitlines() if re.match(r"\s*(%.*= )?[\w.]+ ", l)]
    ops = [l for l in ops if not l.startswith(("func.func", "module"))]
    values = {}  # name -> [def index, last use, offset, size]
    for i, line in enumerate(ops):
        lhs, _, rhs = line.partition(" = ") if re.match(r"%", line) else ("", "", line)
        for use in re.findall(r"%[\w.$-]+(?:#\d+)?", rhs):
            if use in values:
                values[use][1] = i
        if not lhs or not rhs.startswith("llm.") or rhs.startswith(NO_SLOT):
            continue
        names = result_names(lhs)
        om = re.search(r"llm.arena_offsets = \[([-\d, :i]+)\]", rhs)
        if not om:
            sys.exit("op without llm.arena_offsets: " + line)
        offsets = [int(x.split(":")[0]) for x in om.group(1).split(",")]
        sizes = [max(64, (w + 63) // 64 * 64) for w in result_widths(rhs)]
        if not (len(names) == len(offsets) == len(sizes)):
            sys.exit("result/offset/type count mismatch: " + line)
        for name, off, size in zip(names, offsets, sizes):
            if off < 0 or off % 64:
                sys.exit("bad offset %d for %s" % (off, name))
            values[name] = [i, i, off, size]
    high = 0
    items = sorted(values.items(), key=lambda kv: kv[1][0])
    for a, (ad, al, ao, asz) in items:
        high = max(high, ao + asz)
        for b, (bd, bl, bo, bsz) in items:
            if a >= b:
                continue
            live_together = ad <= bl and bd <= al
            overlap = ao < bo + bsz and bo < ao + asz
            if live_together and overlap:
                sys.exit("overlap: %s [%d,+%d) live %d..%d and %s [%d,+%d) live %d..%d"
                         % (a, ao, asz, ad, al, b, bo, bsz, bd, bl))
    if high != arena:
        sys.exit("arena_bytes_per_token %d but slots reach %d" % (arena, high))
    print("PLAN OK %d values %d bytes" % (len(values), arena))


main()
