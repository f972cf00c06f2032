#!/usr/bin/env python3
"""Monitoring overhead: the same training with --monitor off and with every monitor on and in use.

Runs cann-train alternately with `--monitor off` and `--monitor dashboard,prometheus,tensorboard`
(profiling off in both), the same seed and data, several rounds, so drift in the machine's load
falls on both sides. The monitors are used as a user would: a scraper fetches `/metrics` every
second, as Prometheus would, and the dashboard is open in headless Chromium, whose page polls
the agent every second.

The machine is split as a cluster would be: the training runs on every core but the last (the
"node"), the browser, the scraper and this driver on the last (the user's side). Both modes get
the same visitors: in the "off" runs the browser opens the same dashboard files from a static
server in this driver (its polls then fail, as they would against a stopped job) and the
scraper asks it for /metrics. A browser open on the other core slows the training by several
percent with monitoring off too (memory bandwidth and caches shared with the core that
trains), so only a control that has it as well isolates what the engine's monitoring costs.

Validation first: both modes train identically (the same loss at every step), every "on" run
answered at least one scrape per two seconds of its life with the engine's metrics, and the
browser stayed up until the run ended. Two measures, each a paired ratio on/off per round (the
two runs of a round are back to back), judged on the median over rounds, shown with the
spread:
- wall clock: the median iteration of the run, from the step log's `time` stamps (consecutive
  lines: a whole iteration, with everything monitoring adds on the training thread);
- CPU time of the training's processes (launcher, agent and workers: user + system, start-up
  included). The browser's CPU time is printed beside it, not judged: it runs on the user's
  machine.
Exit status 1 when validation fails or an overhead is above the 2% target.

    bench/monitor_overhead/run.py [--steps 200] [--rounds 6] [--nproc N] [--threads 1]
"""
import argparse
import functools
import http.server
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import MIN_REPEATS, LoadLog, Verdicts, machine, spread  # noqa: E402

MODES = {"off": "off", "on": "dashboard,prometheus,tensorboard"}
CHROMIUM = "/usr/bin/chromium"
TARGET = 1.02


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper(threading.Thread):
    """GETs /metrics once a second until stopped; counts the answers that carry the engine's
    metrics, and the thread's CPU time."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.stop = threading.Event()
        self.ok = 0
        self.tries = 0
        self.cpu_s = 0.0

    def run(self):
        start = time.thread_time()
        while not self.stop.wait(1.0):
            self.tries += 1
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    if r.status == 200 and b"cann_" in r.read():
                        self.ok += 1
            except OSError:
                pass  # not up yet, or already gone
        self.cpu_s = time.thread_time() - start


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def static_server():
    """The dashboard's files, served by this driver: the page the browser shows in the "off"
    runs."""
    handler = functools.partial(QuietHandler, directory=os.path.join(ROOT, "web"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_browser(port, profile):
    """Headless Chromium on the dashboard, kept open (a debugging pipe holds it) until killed."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,1100",
            "--remote-debugging-port=0", f"http://127.0.0.1:{port}/"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def wait_cpu(p):
    """Waits for p and returns the CPU time (user + system) of it and its waited descendants."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def run(binary, mode, args, workdir, tag, static_port):
    log = os.path.join(workdir, f"{tag}.jsonl")
    port = free_port()
    cmd = ["taskset", "-c", args.train_cores, binary, "run", "--model", args.model, "--steps",
           str(args.steps), "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
           "--eval-every", "0", "--sample-tokens", "0", "--quiet", "--seed", "7", "--log-json",
           log, "--monitor", MODES[mode], "--monitor-port", str(port),
           "--tensorboard-dir", os.path.join(workdir, f"tb-{tag}")]
    if args.nproc > 1:
        cmd += ["--nproc-per-node", str(args.nproc)]
    if args.threads > 0:
        cmd += ["--threads", str(args.threads)]
    out = open(os.path.join(workdir, f"{tag}.out"), "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    visited = port if mode == "on" else static_port
    scraper = Scraper(visited)
    scraper.start()
    browser = start_browser(visited, os.path.join(workdir, f"profile-{tag}"))
    t0 = time.monotonic()
    cpu_s = wait_cpu(p)
    wall = time.monotonic() - t0
    out.close()
    scraper.stop.set()
    scraper.join()
    extra = {"browser_alive": browser.poll() is None}
    os.killpg(browser.pid, signal.SIGTERM)
    extra.update(browser_cpu_s=wait_cpu(browser), scrapes_ok=scraper.ok,
                 scrape_tries=scraper.tries, wall_s=wall)
    if p.returncode != 0:
        with open(os.path.join(workdir, f"{tag}.out")) as f:
            tail = f.read()[-2000:]
        sys.exit(f"monitor_overhead: `{' '.join(cmd)}` failed ({p.returncode}):\n{tail}")
    rows = [json.loads(l) for l in open(log) if l.startswith("{")]
    rows = [r for r in rows if "step" in r and "event" not in r]
    return rows, cpu_s, extra


def iteration_times(rows, skip):
    t = [r["time"] for r in rows]
    return [b - a for a, b in zip(t[skip:], t[skip + 1:])]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--nproc", type=int, default=0,
                   help="training processes (default: one per core but the last)")
    p.add_argument("--threads", type=int, default=1, help="per process; 0: cann-train's default")
    p.add_argument("--model", default="gpt_tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    binary = os.path.join(a.build, "cann-train")
    if not os.access(binary, os.X_OK):
        print(f"monitor_overhead: {binary} not found; hint: scripts/setup.sh builds it",
              file=sys.stderr)
        return 2
    if not os.access(CHROMIUM, os.X_OK):
        print(f"monitor_overhead: {CHROMIUM} not found; hint: apt-get install -y chromium",
              file=sys.stderr)
        return 2
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("monitor_overhead: needs 2 cores (the training's and the visitors')",
              file=sys.stderr)
        return 2
    where = machine()  # before this driver pins itself to one core
    a.train_cores = ",".join(map(str, cores[:-1]))
    a.nproc = a.nproc or len(cores) - 1
    os.sched_setaffinity(0, {cores[-1]})  # this driver, its scraper and the browser
    skip = 3  # the first iterations pay for page faults and BLAS warm-up in both modes

    load = LoadLog()
    per_mode = {"off": [], "on": []}
    cpu = {"off": [], "on": []}
    extras = []
    losses = {}
    failures = []
    static = static_server()
    with tempfile.TemporaryDirectory(prefix="cann-monitor-overhead-") as work:
        for rnd in range(a.rounds):
            order = ["off", "on"] if rnd % 2 == 0 else ["on", "off"]
            for mode in order:
                rows, cpu_s, extra = run(binary, mode, a, work, f"{mode}{rnd}",
                                         static.server_address[1])
                load.mark()
                cpu[mode].append(cpu_s)
                losses.setdefault(mode, [r["loss"] for r in rows])
                per_mode[mode].append(statistics.median(iteration_times(rows, skip)))
                extra["mode"] = mode
                extras.append(extra)
                if not extra["browser_alive"]:
                    failures.append(f"round {rnd + 1} {mode}: the browser exited before the run")
                if mode == "on":
                    if extra["scrapes_ok"] < extra["wall_s"] / 2 - 1:
                        failures.append(f"round {rnd + 1}: {extra['scrapes_ok']} of "
                                        f"{extra['scrape_tries']} scrapes of /metrics "
                                        f"answered in a {extra['wall_s']:.1f} s run")
                print(f"round {rnd + 1} {mode:>3}: median iteration "
                      f"{per_mode[mode][-1] * 1e3:8.2f} ms, CPU time of the run {cpu_s:7.2f} s",
                      file=sys.stderr, flush=True)

    # Validation: monitoring must not change training.
    off, on = losses["off"], losses["on"]
    if not (len(off) == len(on) == a.steps and all(
            abs(x - y) <= 1e-6 * max(1.0, abs(x)) for x, y in zip(off, on))):
        failures.append("the losses differ between the modes")
    wall_ratios = [x / y for x, y in zip(per_mode["on"], per_mode["off"])]
    cpu_ratios = [x / y for x, y in zip(cpu["on"], cpu["off"])]
    print(f"monitor_overhead: {a.model}, {a.nproc} process(es) x {a.threads or 'default'} "
          f"thread(s), batch {a.batch_size} x {a.seq_len}, {a.steps} steps, {a.rounds} rounds "
          f"of off and on back to back")
    print(f"machine: {where}")
    print(f"training on core(s) {a.train_cores}; browser, scraper and driver on core "
          f"{cores[-1]}. on: --monitor dashboard,prometheus,tensorboard, its /metrics scraped "
          f"every second and its dashboard open in headless Chromium (the page polls every "
          f"second); off: the same browser page and scraper against a static copy of the "
          f"dashboard's files")
    print(f"  iteration ms, median (min..max) over rounds: off "
          f"{spread([1e3 * x for x in per_mode['off']], '{:.2f}')}, on "
          f"{spread([1e3 * x for x in per_mode['on']], '{:.2f}')}")
    print(f"  CPU s of the training's processes: off {spread(cpu['off'], '{:.2f}')}, on "
          f"{spread(cpu['on'], '{:.2f}')}")
    on_x = [e for e in extras if e["mode"] == "on"]
    off_x = [e for e in extras if e["mode"] == "off"]
    print(f"  beside it (not judged): the browser's CPU s per run, off "
          f"{spread([e['browser_cpu_s'] for e in off_x], '{:.2f}')}, on "
          f"{spread([e['browser_cpu_s'] for e in on_x], '{:.2f}')}; /metrics scrapes answered "
          f"{sum(e['scrapes_ok'] for e in on_x)} of {sum(e['scrape_tries'] for e in on_x)}")
    v = Verdicts()
    if a.rounds < MIN_REPEATS:
        v.fail(f"only {a.rounds} rounds: the rules ask for at least {MIN_REPEATS}")
    wall = statistics.median(wall_ratios)
    v.judge(wall <= TARGET, f"wall clock on/off {wall:.4f} ({100 * (wall - 1):+.2f}%; rounds "
            f"{min(wall_ratios):.4f}..{max(wall_ratios):.4f}; target <= +2%)")
    c = statistics.median(cpu_ratios)
    v.judge(c <= TARGET, f"CPU time on/off {c:.4f} ({100 * (c - 1):+.2f}%; rounds "
            f"{min(cpu_ratios):.4f}..{max(cpu_ratios):.4f}; target <= +2%)")
    print("targets:")
    v.print(sys.stdout)
    for f in failures:
        print("FAIL validation:", f)
    print(f"validation: {'ok' if not failures else 'FAILED'} (losses identical over "
          f"{len(off)} steps)")
    print(load.line(a.nproc + 1))  # the training processes and the browser
    return v.exit_status(not failures)


if __name__ == "__main__":
    sys.exit(main())
