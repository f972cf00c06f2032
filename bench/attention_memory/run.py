#!/usr/bin/env python3
"""Attention memory against sequence length: one training run per length of a small causal
model (2 layers, hidden 256, 4 heads, batch 1), reading the engine's activation bytes from its
start-up line, the planner's prediction beside them, and the process's peak resident set
(getrusage of the child). The fused kernel keeps B*H*T floats of softmax statistics per layer
instead of the B*H*T*T probabilities a materialized kernel keeps, so activations grow
linearly; the script prints what the probabilities alone would have taken, checks that the
activations per token stay within 10% from the shortest to the longest sequence, and exits 1
when they do not.

    bench/attention_memory/run.py [--lengths 512,2048,8192] [--build build]
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import Verdicts, machine  # noqa: E402

LAYERS, HIDDEN, HEADS = 2, 256, 4


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="512,2048,8192")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in lengths:
            spec = os.path.join(tmp, f"m{T}.yaml")
            with open(spec, "w") as f:
                f.write(f"architecture: gpt\nhidden_size: {HIDDEN}\nnum_hidden_layers: {LAYERS}\n"
                        f"num_attention_heads: {HEADS}\nvocab_size: 256\nseq_length: {T}\n")
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            out = subprocess.run(
                [os.path.join(a.build, "cann-train"), "run", "--model", spec, "--seq-len", str(T),
                 "--batch-size", "1", "--steps", "2", "--threads", "2", "--monitor", "off",
                 "--eval-every", "0", "--sample-tokens", "0", "--strategy", "dp=1"],
                check=True, capture_output=True, text=True).stdout
            peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            m = re.search(r"activations ([0-9.]+) MiB, total ([0-9.]+) MiB; planner predicts "
                          r"([0-9.]+) MiB", out)
            if not m:
                print(f"FAIL: no memory line in the output at T={T}:\n{out}")
                return 1
            act, total, planned = (float(g) for g in m.groups())
            probs = LAYERS * HEADS * T * T * 4 / 2**20
            rows.append((T, act, total, planned, peak_kib / 1024 if peak_kib > before else None,
                         probs))
    print(f"attention_memory: GPT {LAYERS}x{HIDDEN}, {HEADS} heads, batch 1, fp32, fused attention")
    print(f"{'seq':>6} {'activations MiB':>16} {'per token KiB':>14} {'total MiB':>10} "
          f"{'planner MiB':>12} {'peak RSS MiB':>13} {'T x T probs would add MiB':>26}")
    for T, act, total, planned, rss, probs in rows:
        rss_text = f"{rss:13.0f}" if rss else f"{'n/a':>13}"
        print(f"{T:6d} {act:16.1f} {act * 1024 / T:14.2f} {total:10.1f} {planned:12.1f} "
              f"{rss_text} {probs:26.1f}")
    first, last = rows[0], rows[-1]
    growth = (last[1] / last[0]) / (first[1] / first[0])
    print(f"machine: {machine()} (memory is deterministic here: one run per length)")
    v = Verdicts()
    v.judge(abs(growth - 1) <= 0.10, f"activations per token, {last[0]} against {first[0]}: "
            f"{growth:.3f}x (linear: 1.0, within 10%)")
    print("targets:")
    v.print(sys.stdout)
    return v.exit_status()


if __name__ == "__main__":
    sys.exit(main())
