#!/usr/bin/env python3
"""Training benchmark: cann-train against eager PyTorch on the same GPT, same machine, same run.

Validates first (both losses start near ln 256 and fall by the same amount, within 10%), then
reports tokens/s of both, the ratio, and cann-train's achieved GFLOP/s as a share of the
machine's measured sgemm peak. Exit status 1 when validation fails.

PyTorch runs in three environments and the ratio is taken against its best: as installed; with
OMP_WAIT_POLICY=PASSIVE (its OpenMP workers otherwise spin between operators and starve the
OpenBLAS threads doing the GEMMs on a small machine); and with that plus the OpenMP build of
OpenBLAS, so BLAS and ATen share one thread pool. Both programs inherit the rest of the
environment (OPENBLAS_CORETYPE included), so they use the same GEMM kernels.

    bench/train_vs_pytorch/run.py [--steps 30] [--threads 2] [--build build]

Needs Debian's python3-torch (installed here when missing) and a built tree (BUILD_TARGETS=all scripts/setup.sh).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def ensure_torch():
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
        print("installing Debian's python3-torch (the PyTorch peer)...", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "python3-torch"], check=True,
                       stdout=subprocess.DEVNULL)


def read_jsonl(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def summarize(rows, skip):
    timed = rows[skip:]
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "step_time_s": statistics.median(r["step_time_s"] for r in timed),
        "first_loss": rows[0]["loss"],
        "last_loss": statistics.mean(r["loss"] for r in rows[-5:]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    ensure_torch()
    common = ["--steps", str(a.steps), "--batch-size", "8", "--seq-len", "256", "--lr", "1e-3",
              "--warmup", "3", "--threads", str(a.threads)]
    skip = 2  # first steps pay for allocation and warm-up in both

    peak = json.loads(subprocess.run([os.path.join(a.build, "bench", "sgemm_peak"), str(a.threads)],
                                     check=True, capture_output=True, text=True).stdout)
    log = os.path.join(a.build, "bench_train_vs_pytorch.jsonl")
    subprocess.run([os.path.join(a.build, "cann-train"), "run", "--model",
                    os.path.join(HERE, "model.yaml"), "--log-json", log, "--quiet",
                    "--eval-every", "0", "--sample-tokens", "0"] + common, check=True,
                   stdout=subprocess.DEVNULL)
    with open(log) as f:
        cann_rows = read_jsonl(f.read())
    cann = summarize(cann_rows, skip)
    cann["gflops"] = statistics.median(r["gflops"] for r in cann_rows[skip:])

    envs = [("pytorch", {}), ("pytorch passive", {"OMP_WAIT_POLICY": "PASSIVE"})]
    if os.path.exists(OPENMP_BLAS):
        envs.append(("pytorch passive+omp-blas",
                     {"OMP_WAIT_POLICY": "PASSIVE", "LD_LIBRARY_PATH": OPENMP_BLAS}))
    refs = []
    for name, extra in envs:
        torch_out = subprocess.run(
            ["/usr/bin/python3", os.path.join(HERE, "reference_gpt.py")] + common, check=True,
            capture_output=True, text=True, env={**os.environ, **extra}).stdout
        refs.append((name, summarize(read_jsonl(torch_out), skip)))
    best_name, ref = max(refs, key=lambda nr: nr[1]["tokens_per_s"])

    # Validation: both start at the uniform-byte loss and fall by a similar amount.
    ok = True
    for name, r in [("cann-train", cann)] + refs:
        if abs(r["first_loss"] - 5.545) > 0.3:
            print(f"FAIL: {name} starts at loss {r['first_loss']:.3f}, expected ~5.545")
            ok = False
    drop_c = cann["first_loss"] - cann["last_loss"]
    drop_t = ref["first_loss"] - ref["last_loss"]
    if drop_c < 1.0 or drop_t < 1.0 or abs(drop_c - drop_t) > 0.1 * max(drop_c, drop_t):
        print(f"FAIL: loss drops differ: cann-train {drop_c:.3f}, pytorch {drop_t:.3f}")
        ok = False

    ratio = cann["tokens_per_s"] / ref["tokens_per_s"]
    print(f"train_vs_pytorch: GPT 6x384, 6 heads, seq 256, batch 8, vocab 256, {a.steps} steps, "
          f"{a.threads} threads, OpenBLAS kernels {os.environ.get('OPENBLAS_CORETYPE', 'auto')}")
    print(f"{'':26} {'tokens/s':>10} {'ms/step':>9} {'loss first':>11} {'loss last5':>11}")
    for name, r in [("cann-train", cann)] + refs:
        print(f"{name:26} {r['tokens_per_s']:10.0f} {r['step_time_s'] * 1e3:9.1f} "
              f"{r['first_loss']:11.3f} {r['last_loss']:11.3f}")
    print(f"ratio (cann-train / best pytorch, {best_name}): {ratio:.2f}x; against pytorch as "
          f"installed: {cann['tokens_per_s'] / refs[0][1]['tokens_per_s']:.2f}x")
    print(f"cann-train achieved {cann['gflops']:.1f} GFLOP/s = {cann['gflops'] / peak['gflops']:.0%} "
          f"of measured sgemm peak {peak['gflops']:.1f} GFLOP/s")
    print("validation:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
