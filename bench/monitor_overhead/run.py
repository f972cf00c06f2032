#!/usr/bin/env python3
"""Monitoring overhead: the same short training with --monitor off and with every monitor on.

Runs cann-train alternately with `--monitor off` and `--monitor dashboard,prometheus,tensorboard`
(profiling off in both), the same seed and data, several rounds, so drift in the machine's load
falls on both sides. Validates first: the two modes must train identically (the same loss at
every step). Then compares the iteration time, measured from the step log's `time` stamps
(consecutive lines: a whole iteration, with the snapshot publishing, TensorBoard writing and
step-log writing that monitoring adds), as the median over steps (after the first few) of each
run. The figure is the median over rounds of each round's on/off ratio: the two runs of a round
are back to back, so a change in the machine's load between rounds (other jobs starting or
finishing) cancels out of the ratio. Prints the medians per mode too, and the same paired ratio
of the CPU time all the run's processes used (user + system, start-up included), which other
jobs on a shared machine disturb much less than wall-clock time, and, inside each run, the share
of an iteration spent outside the timed step (where the snapshot publishing, TensorBoard and
step-log writing happen): its difference between the modes is monitoring's own work on the
training thread, a within-run ratio that load changes cannot bias. Exit status 1 when validation
fails; an overhead above the 2% target is reported, not an error.

    bench/monitor_overhead/run.py [--steps 60] [--rounds 4] [--nproc 2] [--threads 1]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODES = {"off": "off", "on": "dashboard,prometheus,tensorboard"}


def run(binary, mode, args, workdir, tag):
    log = os.path.join(workdir, f"{tag}.jsonl")
    cmd = [binary, "run", "--model", args.model, "--steps", str(args.steps), "--batch-size",
           str(args.batch_size), "--seq-len", str(args.seq_len), "--eval-every", "0",
           "--sample-tokens", "0", "--quiet", "--seed", "7", "--log-json", log,
           "--monitor", MODES[mode], "--tensorboard-dir", os.path.join(workdir, f"tb-{tag}")]
    if args.nproc > 1:
        cmd += ["--nproc-per-node", str(args.nproc)]
    if args.threads > 0:
        cmd += ["--threads", str(args.threads)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if r.returncode != 0:
        sys.exit(f"monitor_overhead: `{' '.join(cmd)}` failed ({r.returncode}):\n{r.stderr}")
    rows = [json.loads(l) for l in open(log) if l.startswith("{")]
    rows = [r for r in rows if "step" in r and "event" not in r]
    return rows, cpu_s


def iteration_times(rows, skip):
    t = [r["time"] for r in rows]
    return [b - a for a, b in zip(t[skip:], t[skip + 1:])]


def outside_step_share(rows, skip):
    """Per iteration, the share of its wall time spent outside the timed step (step_time_s
    covers data, forward, backward and optimizer; the rest is step-log writing and, when on,
    monitoring): a ratio inside one run, so a busier machine scales both parts alike."""
    shares = []
    for prev, cur in zip(rows[skip:], rows[skip + 1:]):
        interval = cur["time"] - prev["time"]
        if interval > 0:
            shares.append(max(0.0, interval - cur["step_time_s"]) / interval)
    return statistics.median(shares)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="per process; 0: cann-train's default")
    p.add_argument("--model", default="gpt_tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    binary = os.path.join(a.build, "cann-train")
    skip = 3  # the first iterations pay for page faults and BLAS warm-up in both modes

    per_mode = {"off": [], "on": []}
    cpu = {"off": [], "on": []}
    outside = {"off": [], "on": []}
    losses = {}
    with tempfile.TemporaryDirectory(prefix="cann-monitor-overhead-") as work:
        for rnd in range(a.rounds):
            order = ["off", "on"] if rnd % 2 == 0 else ["on", "off"]
            for mode in order:
                rows, cpu_s = run(binary, mode, a, work, f"{mode}{rnd}")
                cpu[mode].append(cpu_s)
                outside[mode].append(outside_step_share(rows, skip))
                losses.setdefault(mode, [r["loss"] for r in rows])
                per_mode[mode].append(statistics.median(iteration_times(rows, skip)))
                print(f"round {rnd + 1} {mode:>3}: median iteration "
                      f"{per_mode[mode][-1] * 1e3:8.2f} ms, CPU time of the run {cpu_s:7.2f} s",
                      flush=True)

    # Validation: monitoring must not change training.
    off, on = losses["off"], losses["on"]
    same = len(off) == len(on) == a.steps and all(
        abs(x - y) <= 1e-6 * max(1.0, abs(x)) for x, y in zip(off, on))
    t_off = statistics.median(per_mode["off"])
    t_on = statistics.median(per_mode["on"])
    round_ratios = [on_t / off_t for on_t, off_t in zip(per_mode["on"], per_mode["off"])]
    ratio = statistics.median(round_ratios)
    print(f"monitor_overhead: {a.model}, {a.nproc} process(es) x "
          f"{a.threads or 'default'} thread(s), batch {a.batch_size} x {a.seq_len}, "
          f"{a.steps} steps x {a.rounds} rounds per mode, alternating")
    print(f"  --monitor off                              {t_off * 1e3:8.2f} ms/iteration")
    print(f"  --monitor dashboard,prometheus,tensorboard {t_on * 1e3:8.2f} ms/iteration")
    print("  per-round ratios on/off: " + ", ".join(f"{r:.4f}" for r in round_ratios))
    print(f"  median ratio on/off: {ratio:.4f} (overhead {100 * (ratio - 1):+.2f}%; target <= +2%: "
          f"{'PASS' if ratio <= 1.02 else 'MISSED'})")
    cpu_ratios = [on_c / off_c for on_c, off_c in zip(cpu["on"], cpu["off"])]
    print("  CPU time of the whole run (all processes, start-up included), per-round ratios "
          "on/off: " + ", ".join(f"{r:.4f}" for r in cpu_ratios) +
          f"; median {statistics.median(cpu_ratios):.4f}")
    in_run = statistics.median(outside["on"]) - statistics.median(outside["off"])
    print(f"  share of an iteration outside the timed step (median over runs): off "
          f"{100 * statistics.median(outside['off']):.3f}%, on "
          f"{100 * statistics.median(outside['on']):.3f}%; monitoring's own work on the training "
          f"thread: {100 * in_run:+.3f}% of an iteration")
    print(f"  validation: losses {'identical' if same else 'DIFFER'} over {len(off)} steps")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
