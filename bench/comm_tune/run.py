#!/usr/bin/python3
"""Communication tuning benchmark: a run with `cann-train bench tune`'s comm.yaml against the
same run with the defaults, two "nodes" over a shaped 1 Gbit/s link.

The link is bench/dp_vs_ddp's: two network namespaces joined by a veth pair shaped with tc on
both ends, measured first, redis in the first namespace for the rendezvous, each rank pinned to
a core of its own as two nodes would have. The model is the benchmark GPT of
bench/train_vs_pytorch (41 MB of gradients), 2 ranks x 1 thread x 4 sequences.

  1. `cann-train bench tune --nnodes 2 --nproc-per-node 1` runs on both nodes, each writing
     its own comm.yaml; the two files must be the same.
  2. The same training run, `--repeats` times each, alternating: defaults, then with
     `--comm-config` (each node its own file). Each run is timed end to end (start-up and
     warm-up included, from launch to the last process's exit) and by its median step after
     the first two.

Validation comes first: every run's first loss near ln 256, and the tuned run's final loss
equal to the default's within 0.5% (a 2-rank sum is the same whatever the bucket or
algorithm). The target: the tuned run is faster than the defaults end to end and per step (by
the medians over the repeats). Exit status 1 when validation or the target fails, 2 for bad
usage, else 0.

    sudo bench/comm_tune/run.py [--rate-mbit 1000] [--steps 40] [--repeats 3] [--build build]
"""
import argparse
import filecmp
import importlib.util
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("dp_vs_ddp", os.path.join(ROOT, "bench", "dp_vs_ddp",
                                                                         "run.py"))
dp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dp)

sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchlib import MIN_REPEATS, LoadLog, Verdicts, machine, spread  # noqa: E402

RANKS, PER_RANK, SKIP = 2, 4, 2


def common(steps):
    return ["--model", dp.MODEL_YAML, "--data", "fortunes", "--seq-len", str(dp.SEQ), "--lr",
            str(dp.LR), "--warmup", str(dp.WARMUP), "--seed", str(dp.SEED), "--threads", "1",
            "--batch-size", str(RANKS * PER_RANK)]


def launch(link, a, what, per_node_args, timeout_s):
    """Starts `cann-train ARGS` on both nodes with a fresh rendezvous id; returns the wall time
    from launch to the last exit and the nodes' output logs."""
    tag = f"{os.getpid()}-{what}"
    outs = [os.path.join(a.log_dir, f"{what}-node{n}.log") for n in range(RANKS)]
    procs = []
    t0 = time.monotonic()
    for n in range(RANKS):
        argv = [a.binary] + per_node_args(n) + [
            "--nnodes", str(RANKS), "--nproc-per-node", "1", "--rdzv", link.redis_url(),
            "--rdzv-id", tag, "--rdzv-timeout", "60"]
        procs.append(link.spawn(n, argv, outs[n]))
    dp.wait_all(procs, timeout_s, what, outs)
    return time.monotonic() - t0, outs


def train(link, a, what, extra):
    logs = [os.path.join(a.log_dir, f"{what}-node{n}.jsonl") for n in range(RANKS)]
    for l in logs:
        if os.path.exists(l):
            os.remove(l)
    wall, _ = launch(link, a, what, lambda n: ["run", "--steps", str(a.steps), "--eval-every",
                                               "0", "--eval-batches", "8", "--sample-tokens",
                                               "0", "--quiet", "--monitor", "off", "--log-json",
                                               logs[n]] + common(a.steps) + extra(n),
                     120 + 10 * a.steps)
    written = [l for l in logs if os.path.exists(l) and os.path.getsize(l) > 0]
    if len(written) != 1:
        raise dp.RunFailed(f"{what}: expected one step log, found {written}")
    rows = dp.read_jsonl(written[0])
    timed = rows[SKIP:]
    if len(timed) < 3:
        raise dp.RunFailed(f"{what}: only {len(timed)} timed steps")
    return {"wall_s": wall, "step_s": statistics.median(r["step_time_s"] for r in timed),
            "first_loss": rows[0]["loss"],
            "final_loss": rows[-1].get("val_loss") or statistics.median(r["loss"] for r in rows[-5:]),
            "load": os.getloadavg()[0]}


def bench(a, link):
    link.up()
    link.shape(a.rate_mbit * 1e6)
    rates = link.probe(a.rate_mbit * 1e6)
    dp.log(f"link measured at {rates[0] / 1e6:.0f} / {rates[1] / 1e6:.0f} Mbit/s each way")
    link.start_redis(os.path.join(a.log_dir, "redis.log"))

    files = [os.path.join(a.log_dir, f"comm-node{n}.yaml") for n in range(RANKS)]
    for f in files:
        if os.path.exists(f):
            os.remove(f)
    t0 = time.monotonic()
    _, outs = launch(link, a, "tune",
                     lambda n: ["bench", "tune", "--output", files[n], "--model", dp.MODEL_YAML,
                                "--data", "fortunes", "--seq-len", str(dp.SEQ), "--threads", "1",
                                "--batch-size", str(RANKS * PER_RANK)], 1800)
    tune_s = time.monotonic() - t0
    for out in outs:
        with open(out, errors="replace") as f:
            text = f.read()
        if "# cann-train bench tune" in text:
            print(text.rstrip())
    if not all(os.path.exists(f) for f in files) or not filecmp.cmp(files[0], files[1],
                                                                    shallow=False):
        raise dp.RunFailed(f"bench tune: the nodes' files differ or are missing: {files}")
    with open(files[0]) as f:
        print(f.read().rstrip())
    print(f"# tuning took {tune_s:.0f} s on both nodes")

    runs = {"default": [], "tuned": []}
    load = LoadLog()
    for rep in range(a.repeats):
        runs["default"].append(train(link, a, f"default-{rep}", lambda n: []))
        runs["tuned"].append(train(link, a, f"tuned-{rep}",
                                   lambda n: ["--comm-config", files[n]]))
        load.mark()

    failures = []
    ln_vocab = math.log(256)
    for name, rs in runs.items():
        for r in rs:
            if abs(r["first_loss"] - ln_vocab) > 0.1 * ln_vocab:
                failures.append(f"{name}: first loss {r['first_loss']:.3f}, not near ln 256")
    d_loss = statistics.median(r["final_loss"] for r in runs["default"])
    t_loss = statistics.median(r["final_loss"] for r in runs["tuned"])
    if abs(t_loss - d_loss) > 0.005 * d_loss:
        failures.append(f"final loss tuned {t_loss:.4f} against default {d_loss:.4f} (> 0.5%)")

    print(f"\n# {a.repeats} runs each of {a.steps} steps, {RANKS} nodes x 1 rank over "
          f"{a.rate_mbit:g} Mbit/s; median (min..max)")
    print(f"machine: {machine()}")
    print(f"{'# config':10} {'end to end s':>26} {'step ms':>26} {'final loss':>11} {'load':>6}")
    for name, rs in runs.items():
        print(f"{name:10} {spread([r['wall_s'] for r in rs], '{:.2f}'):>26} "
              f"{spread([r['step_s'] * 1e3 for r in rs], '{:.2f}'):>26} "
              f"{statistics.median(r['final_loss'] for r in rs):11.4f} "
              f"{max(r['load'] for r in rs):6.2f}")
    wall_ratio = (statistics.median(r["wall_s"] for r in runs["default"]) /
                  statistics.median(r["wall_s"] for r in runs["tuned"]))
    step_ratio = (statistics.median(r["step_s"] for r in runs["default"]) /
                  statistics.median(r["step_s"] for r in runs["tuned"]))
    print(f"tuned against default: {wall_ratio:.2f}x end to end, {step_ratio:.2f}x per step")
    v = Verdicts()
    if a.repeats < MIN_REPEATS:
        v.fail(f"only {a.repeats} repeats: the rules ask for at least {MIN_REPEATS}")
    v.judge(wall_ratio > 1.0 and step_ratio > 1.0, f"tuned faster than the defaults, end to end "
            f"({wall_ratio:.2f}x) and per step ({step_ratio:.2f}x)")
    print("validation: " + ("ok" if not failures else "FAILED: " + "; ".join(failures)))
    print("targets:")
    v.print(sys.stdout)
    print(load.line(RANKS))
    return v.exit_status(not failures)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate-mbit", type=float, default=1000.0, help="link rate each way")
    p.add_argument("--steps", type=int, default=40, help="steps of each training run")
    p.add_argument("--repeats", type=int, default=3, help="runs of each configuration")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--log-dir", default=None, help="logs (default BUILD/bench_comm_tune)")
    a = p.parse_args()
    if a.steps < SKIP + 5 or a.repeats < 1 or a.rate_mbit <= 0:
        p.error(f"need --steps >= {SKIP + 5}, --repeats >= 1 and a positive --rate-mbit")
    if os.geteuid() != 0:
        print("comm_tune: needs root (network namespaces, veth, tc); hint: run it with sudo",
              file=sys.stderr)
        return 2
    binary = os.path.join(a.build, "cann-train")
    if not os.access(binary, os.X_OK):
        print(f"comm_tune: {binary} not found; hint: scripts/setup.sh builds it", file=sys.stderr)
        return 2
    a.log_dir = a.log_dir or os.path.join(a.build, "bench_comm_tune")
    os.makedirs(a.log_dir, exist_ok=True)
    a.binary = os.path.join(a.log_dir, "cann-train")
    shutil.copy2(binary, a.binary + ".tmp")
    os.replace(a.binary + ".tmp", a.binary)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    link = dp.Link()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= RANKS:
        link.cores = cores[:RANKS]
    try:
        return bench(a, link)
    except KeyboardInterrupt:
        dp.log("comm_tune: interrupted; cleaning up")
        return 130
    except dp.RunFailed as e:
        dp.log(f"comm_tune: {e}")
        return 1
    except subprocess.CalledProcessError as e:
        dp.log(f"comm_tune: `{' '.join(e.cmd)}` failed: {(e.stderr or '').strip()}")
        return 1
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        link.close()


if __name__ == "__main__":
    sys.exit(main())
