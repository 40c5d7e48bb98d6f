#!/usr/bin/env python3
"""PyTorch SDPA serial peers for `vpod bench pod`, on the GPU machine.

For every hybrid case of the vpod JSON (one prefill chunk of `chunk` queries
ending at context `chunk_ctx`, plus `decodes` decodes at context `decode_ctx`)
it times torch.nn.functional.scaled_dot_product_attention run serially
(prefill call, then the batched decode call) with the FlashAttention-2 and the
cuDNN backends, with the method of the vpod bench (warm-up, median of the
timed runs), and prints one side-by-side table plus the sweep summary:

    build/vpod bench pod --json pod.json
    python3 tools/bench_pod_peers.py --vpod-json pod.json [--json peers.json]

Ratios are peer_ms / vpod_ms: above 1.0 means vpod POD is faster.
"""
import argparse
import datetime
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

BACKENDS = [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]


def median_ms(fn, target_ms, min_iters=5, max_iters=100):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    stop.record()
    stop.synchronize()
    per = start.elapsed_time(stop) / 3
    iters = int(min(max(target_ms / max(per, 1e-3), min_iters), max_iters))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for a, b in events:
        a.record()
        fn()
        b.record()
    events[-1][1].synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


class Pool:
    """One flat random buffer per role, viewed as contiguous tensors of any shape."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.buffers = {}

    def get(self, role, shape):
        n = math.prod(shape)
        buf = self.buffers.get(role)
        if buf is None or buf.numel() < n:
            self.buffers.pop(role, None)
            torch.cuda.empty_cache()
            buf = torch.randn(max(n, 1), device="cuda", dtype=self.dtype)
            self.buffers[role] = buf
        return buf[:n].view(*shape)


def run_case(case, pool, target_ms):
    hq, hkv, d = case["q_heads"], case["kv_heads"], 128
    chunk, cctx = case["chunk"], case["chunk_ctx"]
    b, dctx = case["decodes"], case["decode_ctx"]
    scale = 1.0 / math.sqrt(d)
    qp = pool.get("qp", (1, hq, chunk, d))
    kp = pool.get("kp", (1, hkv, cctx, d))
    vp = pool.get("vp", (1, hkv, cctx, d))
    qd = pool.get("qd", (b, hq, 1, d))
    kd = pool.get("kd", (b, hkv, dctx, d))
    vd = pool.get("vd", (b, hkv, dctx, d))
    mask = causal_lower_right(chunk, cctx) if chunk < cctx else None

    def serial():
        o1 = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, is_causal=mask is None,
                                            scale=scale, enable_gqa=True)
        o2 = F.scaled_dot_product_attention(qd, kd, vd, scale=scale, enable_gqa=True)
        return o1, o2

    out = {}
    for label, backend in BACKENDS:
        try:
            with sdpa_kernel([backend]):
                serial()
                out[label] = median_ms(serial, target_ms)
        except RuntimeError as e:
            out[label + "_error"] = str(e).splitlines()[0][:120]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vpod-json", required=True, help="vpod bench pod --json output")
    ap.add_argument("--json", help="write the peers' results and the joined table here")
    ap.add_argument("--case", default="", help="only cases whose name contains this text")
    ap.add_argument("--max-sweep", type=int, default=100000, help="time at most this many sweep cases")
    args = ap.parse_args()

    with open(args.vpod_json) as f:
        vpod = json.load(f)
    dtype = torch.bfloat16 if vpod.get("dtype") == "bf16" else torch.float16
    props = torch.cuda.get_device_properties(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"POD peers  {date}  {props.name}  torch {torch.__version__}  "
          f"{str(dtype).replace('torch.', '')}, head_dim 128 (vpod run {vpod['date']})")
    header = (f"{'case':<34}{'POD':>9}{'serial':>9}{'FA2 ser':>9}{'cuDNN ser':>10}{'bound':>9}"
              f"{'ser/POD':>9}{'FA2/POD':>9}{'cuDNN/POD':>10}")
    print(header)
    pool = Pool(dtype)
    # Allocate each role once at its largest size (random data, reused by views).
    need = {}
    for r in vpod["results"]:
        hq, hkv = r["q_heads"], r["kv_heads"]
        for role, n in (("qp", hq * r["chunk"]), ("kp", hkv * r["chunk_ctx"]),
                        ("vp", hkv * r["chunk_ctx"]), ("qd", r["decodes"] * hq),
                        ("kd", r["decodes"] * hkv * r["decode_ctx"]),
                        ("vd", r["decodes"] * hkv * r["decode_ctx"])):
            need[role] = max(need.get(role, 0), n * 128)
    for role, n in need.items():
        pool.get(role, (n,))
    rows, sweep = [], []
    n_sweep = 0
    for r in vpod["results"]:
        if args.case and args.case not in r["case"]:
            continue
        if not r["named"]:
            n_sweep += 1
            if n_sweep > args.max_sweep:
                continue
        peers = run_case(r, pool, 150.0 if r["named"] else 30.0)
        pod = r["pod_ms"] if r["valid"] else None
        fa2 = peers.get("FA2")
        cud = peers.get("cuDNN")
        row = {"case": r["case"], "named": r["named"], "pod_ms": r["pod_ms"],
               "serial_ms": r["serial_ms"], "bound_ms": r["bound_ms"], "valid": r["valid"],
               "fa2_serial_ms": fa2, "cudnn_serial_ms": cud,
               "fa2_over_pod": fa2 / pod if fa2 and pod else None,
               "cudnn_over_pod": cud / pod if cud and pod else None,
               "serial_over_pod": r["serial_ms"] / pod if pod else None}
        for k, v in peers.items():
            if k.endswith("_error"):
                row[k] = v
        rows.append(row)
        if not r["named"]:
            sweep.append(row)

        def f(x, w=9, p=4):
            return f"{x:>{w}.{p}f}" if x is not None else f"{'-':>{w}}"

        def x(v, w=9):
            return f"{v:>{w - 1}.2f}x" if v is not None else f"{'-':>{w}}"

        if r["named"] or len(vpod["results"]) <= 40:
            print(f"{r['case']:<34}{f(pod)}{f(r['serial_ms'])}{f(fa2)}{f(cud, 10)}"
                  f"{f(r['bound_ms'])}{x(row['serial_over_pod'])}{x(row['fa2_over_pod'])}"
                  f"{x(row['cudnn_over_pod'], 10)}")
            for k, v in peers.items():
                if k.endswith("_error"):
                    print(f"    {k}: {v}")
    if sweep:
        def summary(key):
            vals = [s[key] for s in sweep if s[key] is not None]
            if not vals:
                return "-"
            return (f"mean {statistics.mean(vals):.3f}x median {statistics.median(vals):.3f}x "
                    f"min {min(vals):.3f}x max {max(vals):.3f}x (n={len(vals)})")
        print(f"sweep POD speedup vs our serial: {summary('serial_over_pod')}")
        print(f"sweep POD speedup vs FA2 serial: {summary('fa2_over_pod')}")
        print(f"sweep POD speedup vs cuDNN serial: {summary('cudnn_over_pod')}")
        within = sum(1 for s in sweep if s["pod_ms"] <= 1.25 * s["bound_ms"])
        print(f"sweep within 1.25x of the roofline bound: {within}/{len(sweep)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"date": date, "gpu": props.name, "torch": torch.__version__,
                       "vpod_date": vpod["date"], "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
