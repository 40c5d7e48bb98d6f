"""The weights fingerprint the golden files record: FNV-1a 64 of every
4096th byte of model.safetensors plus its size. Cheap in Python, still
catches any change of make-model's PRNG or layout (tests/model/golden_support.h
computes the same in C++). Imported by make_goldens.py, make_lm_eval_goldens.py
and tests/e2e/test_lm_eval.py."""

import pathlib


def fingerprint(path):
    h = 0xCBF29CE484222325
    data = pathlib.Path(path).read_bytes()
    for b in data[::4096]:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return {"size": len(data), "fnv1a64_stride4096": f"{h:016x}"}
