#!/usr/bin/python3
"""What --elastic costs a recommendation run, and what a lost shard costs it.

The benchmark's two-tower model (two_tower.yaml), 2 workers and 2 parameter-server shards on
this machine, batches of 1024, one thread per process.

  per-step cost   the same run with and without --elastic (the shards' tables in the memory
                  file system, an undo record written before every apply, every process
                  beating), alternated, --repeats pairs: the training loop's samples/s (the
                  run's own figure, the same formula for both) and the wall seconds of the whole
                  job measured here around it; min, median, max; the cost is the median of the
                  pairs' ratios, so a drift of the machine's speed between pairs cancels.
  a lost shard    --kills runs of --elastic, a shard (alternately 0 and 1) SIGKILLed at a moment
                  that moves from run to run; from the step log: the slowest of the 10 steps
                  after the agent's failure_detected event, when it ended after that event,
                  and the median step; every run must end with exit 0 and with the final loss,
                  AUC and log loss of the run left alone (checked: no row lost, none applied
                  twice).

There is no peer: PyTorch's sparse embeddings have no parameter server to lose. Validation
(the killed runs' final line equal to the undisturbed one's) fails the driver (exit 1), and so
does a per-step cost above --max-cost (default 5%).

    bench/recsys/elastic.py [--steps 2000] [--repeats 5] [--kills 5] [--max-cost 0.05]
                            [--build build]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(HERE, "two_tower.yaml")


def command(a, steps, elastic, log=None):
    cmd = [os.path.join(a.build, "cann-train"), "run", "--model", MODEL, "--steps", str(steps),
           "--batch-size", "1024", "--eval-every", "0", "--nproc-per-node", "2", "--ps-shards", "2",
           "--threads", "1", "--quiet"]
    if elastic:
        cmd.append("--elastic")
    if log:
        cmd += ["--log-json", log]
    return cmd


def done_line(out):
    m = re.search(r"done: .*", out)
    if not m:
        sys.exit("recsys elastic bench: no done line in:\n" + out)
    return m.group(0)


def same_result(line):
    """The done line without its speed and traffic, which differ from run to run."""
    return line.split(", ")[0:4]


def spread(values, fmt):
    return "%s / %s / %s" % tuple(fmt % v for v in (min(values), statistics.median(values),
                                                     max(values)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--max-cost", type=float, default=0.05)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    if a.steps < 1000 or a.repeats < 3 or a.kills < 1:
        sys.stderr.write("recsys elastic bench: --steps >= 1000, --repeats >= 3, --kills >= 1\n")
        return 2
    load = os.getloadavg()[0]

    speed = {False: [], True: []}
    wall = {False: [], True: []}
    lines = {}
    for _ in range(a.repeats):
        for elastic in (False, True):
            t0 = time.monotonic()
            r = subprocess.run(command(a, a.steps, elastic), capture_output=True, text=True)
            wall[elastic].append(time.monotonic() - t0)
            if r.returncode != 0:
                sys.exit("recsys elastic bench: the run failed:\n" + r.stdout + r.stderr)
            line = done_line(r.stdout)
            lines[elastic] = line
            speed[elastic].append(float(re.search(r"([0-9.]+) samples/s", line).group(1)))
    ok = same_result(lines[False]) == same_result(lines[True])
    speed_ratios = [e / p for e, p in zip(speed[True], speed[False])]
    wall_ratios = [e / p for e, p in zip(wall[True], wall[False])]
    cost_speed = 1 - statistics.median(speed_ratios)
    cost_wall = statistics.median(wall_ratios) - 1

    recoveries = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.kills):
            log = os.path.join(tmp, "log%d.jsonl" % k)
            proc = subprocess.Popen(command(a, a.steps, True, log), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            rank = 2 + k % 2
            time.sleep(2.0 + 0.37 * k)
            victim = None
            kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
            for kid in kids:
                try:
                    with open("/proc/%s/environ" % kid, "rb") as f:
                        if ("RANK=%d" % rank).encode() in f.read().split(b"\0"):
                            victim = int(kid)
                except OSError:
                    pass
            if victim is None:
                proc.kill()
                sys.exit("recsys elastic bench: shard rank %d not found" % rank)
            os.kill(victim, signal.SIGKILL)
            out = proc.communicate()[0]
            if proc.returncode != 0:
                sys.exit("recsys elastic bench: the killed run failed:\n" + out)
            if same_result(done_line(out)) != same_result(lines[False]):
                print("FAIL: the run whose shard was killed ended otherwise:\n  %s\n  %s" %
                      (done_line(out), lines[False]))
                ok = False
            with open(log) as f:
                records = [json.loads(l) for l in f if l.strip()]
            event = [r for r in records if r.get("event") == "failure_detected"]
            steps = [r for r in records if "step_time_s" in r]
            if not event:
                sys.exit("recsys elastic bench: no failure_detected event in the step log")
            after = [s for s in steps if s["time"] > event[0]["time"]][:10]
            worst = max(after, key=lambda s: s["step_time_s"])
            recoveries.append((worst["step_time_s"], worst["time"] - event[0]["time"],
                               statistics.median(s["step_time_s"] for s in steps), worst["step"]))

    print("recsys --elastic: two-tower bench model, 2 workers + 2 shards, batch 1024, %d steps; "
          "load %.2f" % (a.steps, load))
    print("| run | training samples/s (min / median / max) | job wall s (min / median / max) |")
    print("|---|---|---|")
    for elastic in (False, True):
        print("| %s | %s | %s |" % ("--elastic" if elastic else "plain",
                                   spread(speed[elastic], "%.0f"), spread(wall[elastic], "%.2f")))
    print("pairs --elastic / plain: samples/s %s, wall %s" %
          (spread(speed_ratios, "%.3f"), spread(wall_ratios, "%.3f")))
    print("per-step cost of --elastic: %.1f%% of the training loop's samples/s, %.1f%% of the "
          "job's wall time (medians of the pairs)" % (100 * cost_speed, 100 * cost_wall))
    print("a shard killed %d times: the slowest step after detection took %s ms (median step "
          "%s ms) and ended %s ms after the failure was detected; 0 steps and 0 rows lost" %
          (len(recoveries), spread([1000 * r[0] for r in recoveries], "%.1f"),
           spread([1000 * r[2] for r in recoveries], "%.2f"),
           spread([1000 * r[1] for r in recoveries], "%.1f")))
    if not ok:
        print("FAIL: validation")
        return 1
    if cost_speed > a.max_cost:
        print("FAIL: per-step cost %.1f%% above --max-cost %.1f%%" %
              (100 * cost_speed, 100 * a.max_cost))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
