#!/usr/bin/env python3
"""Checks the machine code of the warp-specialized prefill (prefill_ws.cuh).

The kernel's consumer loop issues S = Q K^T and P V together, waits for S
(wgmma.wait_group 1), runs the softmax while P V is on the tensor cores, then
waits for P V (wait_group 0). ptxas may move that second wait above the
softmax (it did until 582b89d: 2-3% of the kernel, docs/attention.md, "The
softmax beside P V"), or serialize every wgmma (C7513/C7514), and neither
shows as an error. This reads the SASS of each instantiation in libvpod.so
and fails unless
  - some `WARPGROUP.DEPBAR.LE gsb0, 0x1` is followed, before the next
    `WARPGROUP.DEPBAR.LE gsb0, 0x0`, by a whole block's softmax: at least
    kBlockN / 2 = 64 `MUFU.EX2` per thread, and
  - the kernel has fewer wgmma waits than half its HGMMA instructions (a
    serialized kernel waits after every one),
  - no local-memory traffic (STL/LDL: the consumers use ~228 of their 232
    registers, and a spill inside the loop would cost more than the overlap),
    and
  - in the consumers' loop (from the backward branch's target to the branch
    that closes the loop around the wait for S), at most two `R2UR` per
    HGMMA that takes both operands from shared memory: the K and V
    descriptors come from the uniform datapath, and only Q's may be held in
    vector registers. A walk that kept its bounds live through the loop once
    pushed the ring stage out of the uniform registers, and every descriptor
    went through R2UR: 48 for 8 such HGMMA, 7-9% slower (docs/attention.md,
    "The balanced tail").

Usage: check_ws_sass.py LIBVPOD_SO   (exit 77: cannot check here, and why)
       check_ws_sass.py --self-test  (the rules on synthetic SASS)
cuobjdump comes from PATH or the pinned `nvidia-cuda-cuobjdump` wheel
(tools/requirements-test.txt); it needs nvdisasm (`nvidia-cuda-nvdisasm`) beside it.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from importlib import metadata

SKIP = 77
EXPS_PER_BLOCK = 64  # kBlockN / 2: one key block's exponentials per consumer thread

# The instantiations in attention_f16.cu / attention_bf16.cu.
KERNELS = [
    f"_ZN4vpod9attention6device17prefill_ws_kernelI{t}Li{d}ELi{c}EEEvNS0_15AttentionParamsE"
    for t in ("6__half", "13__nv_bfloat16")
    for d in (64, 128)
    for c in (1, 2)  # one CTA per tile, K/V-multicast clusters of 2
]

WAIT_S = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1\b")
WAIT_ALL = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0\b")
WAIT_ANY = re.compile(r"WARPGROUP\.DEPBAR")
EX2 = re.compile(r"\bMUFU\.EX2\b")
HGMMA = re.compile(r"\bHGMMA\.")
LOCAL = re.compile(r"\b(STL|LDL)(\.|\s)")
R2UR = re.compile(r"\bR2UR\b")
ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/")
BRANCH = re.compile(r"\bBRA\s+(?:\w+,\s*)?(0x[0-9a-f]+)")
# An HGMMA with A in registers names a vector register before its descriptor
# ("HGMMA... R88, R124, gdesc[...]"); one with both from shared memory does not.
HGMMA_SS = re.compile(r"\bHGMMA\.\S+\s+R\d+,\s*gdesc")


def consumer_loop(lines):
    """The lines of the loop around the first wait for S, or None."""
    code = [(int(m.group(1), 16), line) for line in lines for m in [ADDRESS.search(line)] if m]
    waits = [i for i, (_, line) in enumerate(code) if WAIT_S.search(line)]
    if not waits:
        return None
    at = code[waits[0]][0]
    for j in range(waits[0], len(code)):
        branch = BRANCH.search(code[j][1])
        if branch and int(branch.group(1), 16) < at:
            target = int(branch.group(1), 16)
            start = next((i for i, (a, _) in enumerate(code) if a == target), None)
            return None if start is None else [line for _, line in code[start : j + 1]]
    return None


def check_sass(sass):
    """Returns None when the kernel passes every rule above, else the first it breaks."""
    lines = sass.splitlines()
    hgmma = sum(1 for line in lines if HGMMA.search(line))
    waits = sum(1 for line in lines if WAIT_ANY.search(line))
    if hgmma == 0:
        return "no HGMMA instruction: not the wgmma kernel"
    spills = sum(1 for line in lines if LOCAL.search(line))
    if spills:
        return f"{spills} local-memory instructions (STL/LDL): registers spill"
    if 2 * waits >= hgmma:
        return f"{waits} wgmma waits for {hgmma} HGMMA: the wgmmas are serialized (C7513/C7514)"
    loop = consumer_loop(lines)
    if loop is None:
        return "no loop around the wait for S (no backward branch past it)"
    ss = sum(1 for line in loop if HGMMA_SS.search(line))
    r2ur = sum(1 for line in loop if R2UR.search(line))
    if r2ur > 2 * ss:
        return (f"{r2ur} R2UR in the consumers' loop for {ss} shared-memory HGMMA: the "
                "K/V descriptors left the uniform datapath")
    best = -1
    for i, line in enumerate(lines):
        if not WAIT_S.search(line):
            continue
        exps = 0
        for later in lines[i + 1 :]:
            if WAIT_ALL.search(later):
                break
            if EX2.search(later):
                exps += 1
        best = max(best, exps)
    if best < 0:
        return "no 'WARPGROUP.DEPBAR.LE gsb0, 0x1': the loop no longer waits for S alone"
    if best < EXPS_PER_BLOCK:
        return (
            f"at most {best} MUFU.EX2 between the wait for S and the wait for P V "
            f"(a block's softmax has {EXPS_PER_BLOCK}): ptxas moved the P V wait above the softmax"
        )
    return None


def self_test():
    def sass(parts):
        """Numbers the instructions 16 bytes apart, as cuobjdump prints them."""
        return "".join(f"        /*{16 * i:04x}*/ {text} ;\n" for i, text in enumerate(parts))

    def loop(r2ur_per_ss=2, wait_first=False, back=True):
        body = []
        for _ in range(8):  # S = Q K^T: both operands in shared memory
            body += ["R2UR UR20, R216"] * r2ur_per_ss
            body += ["HGMMA.64x128x16.F32 R24, gdesc[UR20], R24"]
        body += ["HGMMA.64x128x16.F32 R88, R124, gdesc[UR12].tnspB, R88"] * 8  # P V
        body += ["WARPGROUP.DEPBAR.LE gsb0, 0x1"]
        ex2 = ["MUFU.EX2 R152, R24"] * EXPS_PER_BLOCK
        wait_all = ["WARPGROUP.DEPBAR.LE gsb0, 0x0"]
        body += wait_all + ex2 if wait_first else ex2 + wait_all
        return ["NOP"] + body + (["@P0 BRA 0x10"] if back else ["EXIT"])

    good = sass(loop())
    serial = sass((["HGMMA.64x128x16.F32 R24, gdesc[UR20], R24",
                    "WARPGROUP.DEPBAR.LE gsb0, 0x0"] * 16))
    cases = [
        ("the good loop", good, True),
        ("a hoisted wait", sass(loop(wait_first=True)), False),
        ("serialization", serial, False),
        ("no wait for S", sass(["MUFU.EX2 R152, R24"] * EXPS_PER_BLOCK), False),
        ("a spill", good + "        /*0f00*/ STL.64 [R1+0x8], R8 ;\n", False),
        ("descriptors through R2UR", sass(loop(r2ur_per_ss=6)), False),
        ("no loop", sass(loop(back=False)), False),
    ]
    for name, text, passes in cases:
        why = check_sass(text)
        if (why is None) != passes:
            print(f"self-test, {name}: expected {'pass' if passes else 'fail'}, got {why}")
            return 1
    print("self-test: the rules accept the good loop and reject "
          + ", ".join(name for name, _, passes in cases if not passes))
    return 0


def find_tools():
    """cuobjdump and nvdisasm as an executable pair in one folder, or None."""
    found = shutil.which("cuobjdump")
    if found and (shutil.which("nvdisasm") or os.environ.get("NVDISASM_PATH")):
        return found, None
    paths = {}
    for dist, tool in (("nvidia-cuda-cuobjdump", "cuobjdump"), ("nvidia-cuda-nvdisasm", "nvdisasm")):
        try:
            files = metadata.files(dist) or []
        except metadata.PackageNotFoundError:
            return None
        for f in files:
            if f.name == tool:
                paths[tool] = str(f.locate())
    if len(paths) != 2:
        return None
    # Wheels do not always keep the executable bit: run copies that have it.
    work = tempfile.mkdtemp(prefix="vpod-sass-")
    for tool, path in paths.items():
        dst = os.path.join(work, tool)
        shutil.copyfile(path, dst)
        os.chmod(dst, os.stat(dst).st_mode | stat.S_IXUSR)
    return os.path.join(work, "cuobjdump"), work


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    if self_test() != 0:
        return 1
    library = argv[1]
    tools = find_tools()
    if tools is None:
        print("SKIPPED: no cuobjdump + nvdisasm (pip install -r tools/requirements-test.txt)")
        return SKIP
    cuobjdump, work = tools
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")
    try:
        elves = subprocess.run([cuobjdump, "--list-elf", library], capture_output=True, text=True,
                               env=env, check=False)
        if "sm_90a" not in elves.stdout:
            print(f"SKIPPED: {library} has no sm_90a code (VPOD_CUDA_ARCHS without 90a)")
            return SKIP
        failed = 0
        for kernel in KERNELS:
            dump = subprocess.run([cuobjdump, "--dump-sass", "-fun", kernel, library],
                                  capture_output=True, text=True, env=env, check=False)
            if dump.returncode != 0 or "Function : " not in dump.stdout:
                print(f"FAIL {kernel}: not in {library} ({dump.stderr.strip()[:200]})")
                failed += 1
                continue
            why = check_sass(dump.stdout)
            if why:
                print(f"FAIL {kernel}: {why}")
                failed += 1
            else:
                print(f"ok   {kernel}")
        return 1 if failed else 0
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
