#!/usr/bin/env python3
"""Training benchmark: cann-train against eager PyTorch on the same GPT, same machine, same run,
in fp32 and in bf16 mixed precision.

Engines and settings, the configurations taking turns:
  cann-train fp32 and --precision bf16, with its defaults, run --repeats times (default 3);
  PyTorch fp32, and PyTorch with its CPU autocast to bf16 (the mixed-precision path its docs
  give for CPUs), each in up to four environments, the best one counting: every environment
  runs once in the first round, and the one with the best end-to-end figure for each precision
  runs in every later round too (its first run among its repeats); the judged figure is the
  best environment's median, where an environment that ran once counts with that run: as
  installed; with
  OMP_WAIT_POLICY=PASSIVE (its OpenMP workers otherwise spin between operators and starve the
  BLAS threads on a small machine); with that plus the OpenMP build of OpenBLAS, so BLAS
  and ATen share one thread pool; and, on an AVX-512 processor, with that plus
  ATEN_CPU_CAPABILITY=avx512 (PyTorch may dispatch its own kernels at AVX2 otherwise). Both
  programs inherit the rest of the environment, OPENBLAS_CORETYPE included (where it names
  older kernels than the processor has, PyTorch's fp32 GEMMs on OpenBLAS run those; cann-train's
  GEMMs are oneDNN's, which choose their own).

Validation first, for every run: the loss starts near ln 256 and falls by the same amount as
PyTorch fp32's (within 10%). Then per configuration the end-to-end tokens/s (the run's tokens
over the wall time of the whole process: start-up, warm-up steps, the final validation and exit
included; the PyTorch peer scores the same 8 held-out batches at the end that cann-train's run
does by default) with min,
median and max over the repeats, the steady step time (median step after the first two), the
loss, and the executed TFLOP/s as a share of the machine's FMA peak of
that precision (bench/gemm --peak-only). FLOPs are counted by one formula for both engines:
6 per parameter of each matrix product per token, plus the causal half of attention
(6 x layers x sequence x hidden per token), so neither the masked blocks cann-train skips nor
the ones PyTorch computes are counted.

Targets (judged on the median end-to-end tokens/s of the repeats, what a user waits for; the
best PyTorch environment is chosen by the same figure): cann-train fp32 at least 2.0x the best
PyTorch fp32; cann-train bf16 at least 1.5x the best PyTorch bf16 autocast and at least 3.0x the
best PyTorch fp32. Exit status 1 when validation fails or a target is missed.

    bench/train_vs_pytorch/run.py [--steps 30] [--threads 2] [--repeats 3] [--build build]

Needs Debian's python3-torch (installed here when missing) and a built tree (BUILD_TARGETS=all scripts/setup.sh).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
LAYERS, HIDDEN, SEQ, VOCAB, BATCH = 6, 384, 256, 256, 8  # model.yaml; reference_gpt.py


def ensure_torch():
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
        print("installing Debian's python3-torch (the PyTorch peer)...", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "python3-torch"], check=True,
                       stdout=subprocess.DEVNULL)


def cpu_has_avx512():
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    return all(x in flags for x in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def read_jsonl(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def flops_per_token():
    matmul_params = LAYERS * 12 * HIDDEN * HIDDEN + VOCAB * HIDDEN  # blocks + tied head
    return 6 * matmul_params + 6 * LAYERS * SEQ * HIDDEN


def one_run(cmd, env, log, skip, steps):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    wall = time.perf_counter() - t0
    if log:
        with open(log) as f:
            rows = read_jsonl(f.read())
        os.remove(log)
    else:
        rows = read_jsonl(out)
    rows = [r for r in rows if "step_time_s" in r]  # the peer's validation line apart
    step = statistics.median(r["step_time_s"] for r in rows[skip:])
    return {"e2e_tokens_per_s": steps * BATCH * SEQ / wall, "step_time_s": step, "wall_s": wall,
            "first_loss": rows[0]["loss"],
            "last_loss": statistics.mean(r["loss"] for r in rows[-5:])}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    ensure_torch()
    common = ["--steps", str(a.steps), "--batch-size", str(BATCH), "--seq-len", str(SEQ),
              "--lr", "1e-3", "--warmup", "3", "--threads", str(a.threads)]
    skip = 2  # first steps pay for allocation and warm-up in both
    peak = json.loads(subprocess.run(
        [os.path.join(a.build, "bench", "gemm_bench"), "--threads", str(a.threads), "--peak-only"],
        check=True, capture_output=True, text=True).stdout)["peak_gflops"]

    log = os.path.join(a.build, "bench_train_vs_pytorch.jsonl")
    cann = [os.path.join(a.build, "cann-train"), "run", "--model", os.path.join(HERE, "model.yaml"),
            "--log-json", log, "--quiet", "--eval-every", "0", "--sample-tokens", "0",
            "--monitor", "off"] + common
    ref = ["/usr/bin/python3", os.path.join(HERE, "reference_gpt.py")] + common
    envs = [("as installed", {}), ("passive", {"OMP_WAIT_POLICY": "PASSIVE"})]
    if os.path.exists(OPENMP_BLAS):
        envs.append(("passive+omp-blas",
                     {"OMP_WAIT_POLICY": "PASSIVE", "LD_LIBRARY_PATH": OPENMP_BLAS}))
        if cpu_has_avx512():
            # PyTorch 1.13 dispatches its own kernels at AVX2 on some AVX-512 processors (it
            # says "CPU capability usage: AVX2" on this one); ATEN_CPU_CAPABILITY asks for more.
            envs.append(("passive+omp-blas+avx512",
                         {"OMP_WAIT_POLICY": "PASSIVE", "LD_LIBRARY_PATH": OPENMP_BLAS,
                          "ATEN_CPU_CAPABILITY": "avx512"}))
    # (engine, precision, environment name, command, extra environment, log file)
    configs = [("cann-train", "fp32", "default", cann + ["--precision", "fp32"], {}, log),
               ("cann-train", "bf16", "default", cann + ["--precision", "bf16"], {}, log)]
    for name, extra in envs:
        configs.append(("pytorch", "fp32", name, ref, extra, None))
        configs.append(("pytorch", "bf16", name, ref + ["--autocast", "bf16"], extra, None))
    runs = {i: [] for i in range(len(configs))}

    def med(i, key="e2e_tokens_per_s"):
        return statistics.median(x[key] for x in runs[i])

    # The first round runs every configuration once and picks PyTorch's environment for each
    # precision by its end-to-end figure; the later rounds repeat cann-train's two and those
    # two (the first round's runs count among their repeats).
    chosen = set(range(len(configs)))
    for r in range(a.repeats):
        for i, (_, _, _, cmd, extra, lf) in enumerate(configs):
            if i in chosen:
                runs[i].append(one_run(cmd, {**os.environ, **extra}, lf, skip, a.steps))
        if r == 0:
            chosen = {i for i, c in enumerate(configs) if c[0] == "cann-train"}
            for prec in ("fp32", "bf16"):
                chosen.add(max((i for i, c in enumerate(configs)
                                if c[0] == "pytorch" and c[1] == prec), key=med))
        print(f"round {r + 1} of {a.repeats} done", flush=True)

    def best(engine, precision):
        # Over every environment: one that ran once counts with that run, which only favours
        # the peer (a single run's luck is not averaged away).
        return max((i for i, c in enumerate(configs) if c[0] == engine and c[1] == precision),
                   key=med)

    # Validation: every run starts at the uniform-byte loss and falls like PyTorch fp32's.
    ok = True
    drop_ref = statistics.median(x["first_loss"] - x["last_loss"] for x in runs[best("pytorch", "fp32")])
    for i, c in enumerate(configs):
        for x in runs[i]:
            drop = x["first_loss"] - x["last_loss"]
            if abs(x["first_loss"] - math.log(256)) > 0.3 or drop < 1.0 or \
                    abs(drop - drop_ref) > 0.1 * max(drop, drop_ref):
                print(f"FAIL validation: {c[0]} {c[1]} ({c[2]}) loss {x['first_loss']:.3f} -> "
                      f"{x['last_loss']:.3f}, PyTorch fp32 falls by {drop_ref:.3f}")
                ok = False

    fpt = flops_per_token()
    load = os.getloadavg()[0]
    print(f"train_vs_pytorch: GPT {LAYERS}x{HIDDEN}, 6 heads, seq {SEQ}, batch {BATCH}, vocab "
          f"{VOCAB}, {a.steps} steps x {a.repeats} repeats, {a.threads} threads, OpenBLAS kernels "
          f"{os.environ.get('OPENBLAS_CORETYPE', 'auto')}, load average {load:.2f} after the runs")
    print(f"FMA peak ({a.threads} threads): fp32 {peak['fp32']:.0f} GFLOP/s, bf16 "
          f"{peak['bf16']:.0f} GFLOP/s; {fpt / 1e6:.1f} MFLOP per token executed (one formula)")
    print("end to end: the run's tokens / the process's wall time; steady: the median step after "
          "the first two; TFLOP/s and peak share: steady")
    print(f"{'engine':11} {'prec':5} {'environment':23} {'e2e tokens/s median (min..max)':>31} "
          f"{'wall s':>7} {'steady ms':>9} {'loss first':>10} {'last5':>6} {'TFLOP/s':>8} "
          f"{'peak':>5}")
    for i, (engine, prec, env, *_rest) in enumerate(configs):
        tps = [x["e2e_tokens_per_s"] for x in runs[i]]
        step = med(i, "step_time_s")
        tflops = BATCH * SEQ / step * fpt / 1e12
        spread_text = f"({min(tps):7.0f}..{max(tps):7.0f})" if len(tps) > 1 else f"{'(1 run)':>17}"
        print(f"{engine:11} {prec:5} {env:23} {med(i):13.0f} {spread_text} "
              f"{med(i, 'wall_s'):7.1f} {step * 1e3:9.1f} "
              f"{med(i, 'first_loss'):10.3f} {med(i, 'last_loss'):6.3f} {tflops:8.3f} "
              f"{tflops * 1e3 / peak[prec]:5.0%}")

    c32, c16 = med(best("cann-train", "fp32")), med(best("cann-train", "bf16"))
    p32, p16 = best("pytorch", "fp32"), best("pytorch", "bf16")
    targets = [
        ("cann-train fp32 / best PyTorch fp32", c32 / med(p32), 2.0, configs[p32][2]),
        ("cann-train bf16 / best PyTorch bf16 autocast", c16 / med(p16), 1.5, configs[p16][2]),
        ("cann-train bf16 / best PyTorch fp32", c16 / med(p32), 3.0, configs[p32][2]),
    ]
    for what, ratio, target, env in targets:
        met = ratio >= target
        ok &= met
        print(f"{what} ({env}), end to end: {ratio:.2f}x, target {target:.1f}x: "
              f"{'PASS' if met else 'FAIL'}")
    print("validation and targets:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
