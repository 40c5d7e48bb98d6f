#!/usr/bin/env python3
"""Replays POD's serial fallback on a --no-fallback sweep under other
kWsPrefillSpeedup factors (docs/pod.md, *Is kWsPrefillSpeedup still right?*).

Every case of the sweep ran fused and was timed beside the serial kernels; the
JSON holds both estimates and the serial estimate's prefill part (estimated
with the planner's factor, 1.15). For a factor s the prefill part scales by
1.15 / s, and a case runs fused when the fused estimate beats the serial one.
"""
import json
import statistics
import sys

PLANNER_FACTOR = 1.15


def main(path):
    cases = json.load(open(path))["results"]
    print("s     mean    median  min    fused  below0.98  off>2%")
    for s in (1.0, 1.10, 1.15, 1.20, 1.25, 1.30, 1.40, 1.50):
        speedups, fused_count, below, off = [], 0, 0, 0
        for r in cases:
            prefill = r["serial_prefill_estimate_us"]
            serial_est = r["serial_estimate_us"] - prefill + prefill * PLANNER_FACTOR / s
            fused = r["estimate_us"] < serial_est
            taken = r["pod_ms"] if fused else r["serial_ms"]
            x = r["serial_ms"] / taken
            speedups.append(x)
            fused_count += fused
            below += x < 0.98
            off += taken > 1.02 * min(r["pod_ms"], r["serial_ms"])
        print(f"{s:.2f}  {statistics.mean(speedups):.4f}  {statistics.median(speedups):.4f}  "
              f"{min(speedups):.3f}  {fused_count:5d}  {below:9d}  {off:6d}")
    best = [r["serial_ms"] / min(r["pod_ms"], r["serial_ms"]) for r in cases]
    print(f"the faster side every time: mean {statistics.mean(best):.4f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: replay_pod_fallback.py SWEEP.json (vpod bench pod --no-fallback --json)")
    main(sys.argv[1])
