#!/usr/bin/env python3
"""PyTorch SDPA peers for `vpod bench attention`, on the GPU machine.

Times torch.nn.functional.scaled_dot_product_attention with the
FlashAttention-2 and cuDNN backends on the same shapes as the vpod benchmark
(bottom-right causal prefill via causal_lower_right, GQA via enable_gqa),
with the same method (warm-up, median of many runs, input sets rotating past
L2), and prints one side-by-side table with vpod's results read from its
--json file:

    build/vpod bench attention --json vpod.json
    python3 tools/bench_attention_peers.py --vpod-json vpod.json [--json peers.json]

Ratios are peer_ms / vpod_ms: above 1.0 means vpod is faster.
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

# Same shapes as bench/attention_bench.cpp (used when no --vpod-json is given).
DEFAULT_SHAPES = [
    {"name": "prefill 4096", "decode": False, "batch": 1, "cached_len": 0, "num_new": 4096},
    {"name": "prefill 16384", "decode": False, "batch": 1, "cached_len": 0, "num_new": 16384},
    {"name": "chunk 1024 @8192", "decode": False, "batch": 1, "cached_len": 7168, "num_new": 1024},
    {"name": "chunk 2048 @16384", "decode": False, "batch": 1, "cached_len": 14336, "num_new": 2048},
    {"name": "decode 32x4096", "decode": True, "batch": 32, "cached_len": 4095, "num_new": 1},
    {"name": "decode 64x8192", "decode": True, "batch": 64, "cached_len": 8191, "num_new": 1},
    {"name": "decode 16x16384", "decode": True, "batch": 16, "cached_len": 16383, "num_new": 1},
]
BACKENDS = [("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)]
PEAK_TFLOPS = 771.0
PEAK_TBPS = 4.24


def flops_and_bytes(shape, hq, hkv, d, elem=2):
    b, c, n = shape["batch"], shape["cached_len"], shape["num_new"]
    pairs = sum(c + i + 1 for i in range(n)) * b
    ctx = c + n
    kv = 2.0 * ctx * hkv * d * elem * b
    qo = 2.0 * n * hq * d * elem * b
    return 4.0 * d * hq * pairs, kv + qo


def median_ms(fn, sets, target_ms=300.0, min_iters=20, max_iters=200):
    warm = max(3, sets)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(warm):
        fn(i % sets)
    stop.record()
    stop.synchronize()
    per = start.elapsed_time(stop) / warm
    iters = int(min(max(target_ms / max(per, 1e-3), min_iters), max_iters))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for i, (a, b) in enumerate(events):
        a.record()
        fn(i % sets)
        b.record()
    events[-1][1].synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events), iters


def run_shape(shape, hq, hkv, d, dtype, l2_bytes):
    b, c, n = shape["batch"], shape["cached_len"], shape["num_new"]
    ctx = c + n
    elem = torch.finfo(dtype).bits // 8
    set_bytes = (2 * b * hq * n * d + 2 * b * hkv * ctx * d) * elem
    sets = max(1, min(8, math.ceil(3 * l2_bytes / set_bytes)))
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = []
    for _ in range(sets):
        q = torch.randn(b, hq, n, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, ctx, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, hkv, ctx, d, device="cuda", dtype=dtype, generator=gen)
        inputs.append((q, k, v))
    scale = 1.0 / math.sqrt(d)
    if shape["decode"] or n == 1:
        mask, causal = None, False  # one query sees its whole context
    elif c == 0:
        mask, causal = None, True  # square: top-left == bottom-right
    else:
        mask, causal = causal_lower_right(n, ctx), False

    def call(i):
        q, k, v = inputs[i]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=scale, enable_gqa=True)

    results, outputs = {}, {}
    for label, backend in BACKENDS:
        try:
            with sdpa_kernel([backend]):
                outputs[label] = call(0)
                ms, iters = median_ms(call, sets)
            results[label] = {"ms": ms, "iters": iters}
        except RuntimeError as e:  # backend refuses the shape/mask
            results[label] = {"error": str(e).splitlines()[0][:120]}
    if len(outputs) == 2:  # the two peers must agree with each other
        diff = (outputs["FA2"].float() - outputs["cuDNN"].float()).abs().max().item()
        results["peer_max_diff"] = diff
    del inputs
    torch.cuda.empty_cache()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vpod-json", help="vpod bench attention --json output")
    ap.add_argument("--json", help="write the peers' results and the joined table here")
    ap.add_argument("--case", default="", help="only cases whose name contains this text")
    args = ap.parse_args()

    vpod = None
    if args.vpod_json:
        with open(args.vpod_json) as f:
            vpod = json.load(f)
    shapes = vpod["shapes"] if vpod else DEFAULT_SHAPES
    heads = vpod["heads"] if vpod else {"q": 32, "kv": 8, "head_dim": 128}
    hq, hkv, d = heads["q"], heads["kv"], heads["head_dim"]
    dtype = torch.bfloat16 if vpod and vpod.get("dtype") == "bf16" else torch.float16
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20)

    vpod_ms = {}
    if vpod:
        for r in vpod["results"]:
            vpod_ms[(r["case"], r["layout"])] = r["ms"] if r.get("valid") else None

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"attention peers  {date}  {props.name}  torch {torch.__version__}  "
          f"{str(dtype).replace('torch.', '')} ({hq} q heads, {hkv} kv heads, head_dim {d})")
    layouts = ["per_layer", "all_layers", "paged16", "paged256"]
    header = (f"{'case':<19}" + "".join(f"{l:>11}" for l in layouts) +
              f"{'FA2':>10}{'cuDNN':>10}{'FA2/vpod':>10}{'cuDNN/vpod':>11}{'all/per':>9}  vpod rate")
    print(header)
    joined = []
    for shape in shapes:
        if args.case and args.case not in shape["name"]:
            continue
        peers = run_shape(shape, hq, hkv, d, dtype, l2)
        flops, nbytes = flops_and_bytes(shape, hq, hkv, d)
        ours = {l: vpod_ms.get((shape["name"], l)) for l in layouts}
        best = ours["per_layer"]

        def fmt_ms(x):
            return f"{x:>11.4f}" if x else f"{'-':>11}"

        def ratio(peer):
            p = peers.get(peer, {})
            if best and "ms" in p:
                return p["ms"] / best
            return None

        fa2, cudnn = ratio("FA2"), ratio("cuDNN")
        all_per = (ours["per_layer"] / ours["all_layers"]) if best and ours["all_layers"] else None
        if best:
            rate = (f"{nbytes / (best * 1e-3) / 1e12:.2f} TB/s" if shape["decode"]
                    else f"{flops / (best * 1e-3) / 1e12:.0f} TFLOP/s")
        else:
            rate = "-"
        peer_cols = "".join(
            f"{peers[l]['ms']:>10.4f}" if "ms" in peers.get(l, {}) else f"{'err':>10}"
            for l, _ in BACKENDS)
        print(f"{shape['name']:<19}" + "".join(fmt_ms(ours[l]) for l in layouts) + peer_cols +
              (f"{fa2:>9.2f}x" if fa2 else f"{'-':>10}") +
              (f"{cudnn:>10.2f}x" if cudnn else f"{'-':>11}") +
              (f"{all_per:>8.3f}x" if all_per else f"{'-':>9}") + f"  {rate}")
        for l, _ in BACKENDS:
            if "error" in peers.get(l, {}):
                print(f"    {l}: {peers[l]['error']}")
        joined.append({"shape": shape, "peers": peers, "vpod_ms": ours, "fa2_over_vpod": fa2,
                       "cudnn_over_vpod": cudnn, "all_layers_speed_vs_per_layer": all_per,
                       "flops": flops, "bytes": nbytes})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": date, "gpu": props.name, "torch": torch.__version__,
                       "rows": joined}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
