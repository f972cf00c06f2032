#!/usr/bin/python3
"""Recommendation benchmark: cann-train's two-tower model with parameter-server shards against
PyTorch's nn.EmbeddingBag(sparse=True) + DDP over Gloo, on the same impressions.

dump_clicks writes the synthetic stream cann-train trains on (the same positions, the same
held-out rows) and PyTorch trains on that file (reference_two_tower.py), so both see exactly
the same data and are scored by the same AUC formula (Mann-Whitney, ties at their average
rank) on the same held-out impressions. For each process count P (workers; cann-train adds S
shard processes, S = max(1, P/2)), both engines train the same global batch for the same steps,
each configuration --repeats times. Judged end to end:

    samples/s     = samples trained / wall seconds of the whole job (start-up, data loading,
                    evaluation included), measured by this driver around each command
    bytes/step    = bytes the loopback interface carried during the job / steps (both engines'
                    traffic, counted the same way from /proc/net/dev)

Validation first: both engines learn (AUC > 0.7) and reach the same AUC (within 0.002); then
the table (median with min..max of each figure, the machine and its load) and the targets:
  - cann-train's median samples/s at least 2x PyTorch's, at every P >= 2;
  - equal AUC (within 0.002);
  - in a longer cann-train run (--converge-steps) on the same model the AUC within 0.01 of the
    planted ceiling.
With --link 1gbit (root), the 2- and 4-process runs are also made across two "nodes": two
network namespaces joined by a veth pair shaped to 1 Gbit/s each way with tc (the namespaces,
redis rendezvous and shaping of bench/dp_vs_ddp), half the processes of each engine in each:
cann-train as one agent per node (--nnodes 2, P/2 workers and one shard per node), PyTorch as
one process per rank (RANK, WORLD_SIZE, MASTER_ADDR on the first node). The wall time runs from
the first process's start to the last one's exit; bytes are every interface's transmitted
bytes in both namespaces (the veth link and each node's loopback).

Exit status 1 when validation or a target fails, 2 for bad usage.

    bench/recsys/run.py [--procs 1,2,4] [--steps 600] [--batch 1024] [--repeats 3]
                        [--converge-steps 6000] [--link 1gbit] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import MIN_REPEATS, LoadLog, Verdicts, machine, spread  # noqa: E402

MODEL = os.path.join(HERE, "two_tower.yaml")
EVAL_ROWS = 100000
SEED = 1337  # cann-train run's default --seed: the stream dump_clicks writes


def lo_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])  # transmitted bytes (equal to received on lo)
    return 0


def timed(cmd):
    b0, t0 = lo_bytes(), time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall, wire = time.perf_counter() - t0, lo_bytes() - b0
    if r.returncode != 0:
        sys.exit(f"recsys bench: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout, wall, wire


def cann_run(a, procs, shards, steps):
    cmd = [os.path.join(a.build, "cann-train"), "run", "--model", MODEL, "--steps", str(steps),
           "--batch-size", str(a.batch), "--eval-every", "0", "--eval-rows", str(EVAL_ROWS),
           "--seed", str(SEED), "--threads", str(max(1, a.cores // (procs + shards)))]
    if procs > 1 or shards > 0:
        cmd += ["--nproc-per-node", str(procs), "--ps-shards", str(shards)]
    out, wall, wire = timed(cmd)
    line = next(l for l in out.splitlines() if "done: steps" in l)
    auc = float(line.split("auc ")[1].split(",")[0])
    ll = float(line.split("log loss ")[1].split(",")[0])
    ev = next(l for l in out.splitlines() if "planted ceiling" in l)
    ceiling = float(ev.split("planted ceiling: auc ")[1].split(",")[0])
    return {"wall": wall, "wire": wire, "auc": auc, "log_loss": ll, "ceiling": ceiling}


def torch_run(a, data, procs, steps):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "reference_two_tower.py"), "--data", data,
           "--procs", str(procs), "--batch", str(a.batch), "--steps", str(steps),
           "--threads", str(max(1, a.cores // procs))]
    out, wall, wire = timed(cmd)
    j = json.loads(out.strip().splitlines()[-1])
    return {"wall": wall, "wire": wire, "auc": j["auc"], "log_loss": j["log_loss"]}


def ns_tx_bytes(link):
    total = 0
    for ns in link.ns:
        out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/dev"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines()[2:]:
            total += int(line.split(":")[1].split()[8])
    return total


def link_run(a, link, data, engine, procs, steps, tag):
    """One run of `engine` with procs processes over the two namespaces (procs/2 each)."""
    ddp = __import__("ddp_bench")
    per_node = procs // 2
    outs, ps = [], []
    b0, t0 = ns_tx_bytes(link), time.perf_counter()
    if engine == "cann":
        for n in range(2):
            out = os.path.join(a.log_dir, f"{tag}-cann-node{n}.log")
            argv = [os.path.join(a.build, "cann-train"), "run", "--model", MODEL, "--steps",
                    str(steps), "--batch-size", str(a.batch), "--eval-every", "0", "--eval-rows",
                    str(EVAL_ROWS), "--seed", str(SEED), "--threads",
                    str(max(1, a.cores // (2 * (per_node + 1)))), "--nnodes", "2",
                    "--nproc-per-node", str(per_node), "--ps-shards", "2", "--rdzv",
                    link.redis_url(), "--rdzv-id", tag, "--rdzv-timeout", "60"]
            ps.append(link.spawn(n, argv, out, ddp.clean_env(), pin=False))
            outs.append(out)
    else:
        for r in range(procs):
            out = os.path.join(a.log_dir, f"{tag}-torch-rank{r}.log")
            env = ddp.clean_env(RANK=r, WORLD_SIZE=procs, MASTER_ADDR=link.ip[0],
                                MASTER_PORT=29600 + (hash(tag) % 300),
                                GLOO_SOCKET_IFNAME=link.dev[r // per_node])
            argv = ["/usr/bin/python3", os.path.join(HERE, "reference_two_tower.py"), "--data",
                    data, "--batch", str(a.batch), "--steps", str(steps), "--threads",
                    str(max(1, a.cores // procs))]
            ps.append(link.spawn(r // per_node, argv, out, env, pin=False))
            outs.append(out)
    ddp.wait_all(ps, 600, f"{engine} over the link", outs)
    wall, wire = time.perf_counter() - t0, ns_tx_bytes(link) - b0
    text = "".join(open(o, errors="replace").read() for o in outs)
    if engine == "cann":
        line = next(l for l in text.splitlines() if "done: steps" in l)
        auc = float(line.split("auc ")[1].split(",")[0])
    else:
        auc = json.loads(next(l for l in text.splitlines() if l.startswith("{")))["auc"]
    return {"wall": wall, "wire": wire, "auc": auc, "log_loss": float("nan")}


def print_table(a, where, rows, samples, v):
    """Prints one table (loopback or the shaped link) and judges its targets into v; returns
    whether every validation held."""
    ok = True
    print(f"\n{where}")
    print(f"{'P':>2} {'engine':<22} {'samples/s med (min..max)':>26} {'AUC':>8} {'log loss':>9} "
          f"{'KiB/step':>9} {'ratio':>6} {'load':>5}")
    for n, shards, c, t, load in rows:
        cs = [samples / x["wall"] for x in c]
        ts = [samples / x["wall"] for x in t]
        ratio = statistics.median(cs) / statistics.median(ts)
        auc_c = statistics.median(x["auc"] for x in c)
        auc_t = statistics.median(x["auc"] for x in t)
        label = f"cann-train {n}w+{shards}ps" if shards else "cann-train 1 process"
        print(f"{n:>2} {label:<22} {spread(cs, '{:.0f}'):>26} {auc_c:>8.4f} "
              f"{statistics.median(x['log_loss'] for x in c):>9.4f} "
              f"{statistics.median(x['wire'] for x in c) / a.steps / 1024:>9.1f} {ratio:>6.2f} "
              f"{load:>5.2f}")
        print(f"{'':>2} {'pytorch ddp' if n > 1 else 'pytorch 1 process':<22} "
              f"{spread(ts, '{:.0f}'):>26} "
              f"{auc_t:>8.4f} {statistics.median(x['log_loss'] for x in t):>9.4f} "
              f"{statistics.median(x['wire'] for x in t) / a.steps / 1024:>9.1f}")
        for x in c + t:
            if x["auc"] < 0.7:
                print(f"validation failed: {n} processes learned nothing (AUC {x['auc']:.4f})")
                ok = False
        v.judge(abs(auc_c - auc_t) <= 0.002, f"{n} processes ({where}), AUC {auc_c:.4f} against "
                f"PyTorch's {auc_t:.4f} (within 0.002)")
        if n >= 2:
            v.judge(ratio >= 2.0, f"{n} processes ({where}), {ratio:.2f}x PyTorch's samples/s "
                    f"(>= 2x)")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", default="1,2,4")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--converge-steps", type=int, default=6000)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--link", choices=["none", "1gbit"], default="none")
    a = p.parse_args()
    a.cores = os.cpu_count()
    procs = [int(x) for x in a.procs.split(",")]
    if any(a.batch % n for n in procs):
        sys.exit("recsys bench: --batch must divide over every process count")
    if subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"]).returncode != 0:
        sys.exit("recsys bench: PyTorch is missing; hint: apt-get install -y python3-torch")
    data = os.path.join(tempfile.mkdtemp(prefix="recsys-bench-"), "clicks.bin")
    subprocess.run([os.path.join(a.build, "bench", "dump_clicks"), MODEL,
                    str(a.steps * a.batch), str(EVAL_ROWS), str(SEED), data], check=True)
    link_rows = []
    load = LoadLog()
    if a.link == "1gbit":
        if os.geteuid() != 0:
            sys.exit("recsys bench: --link needs root (network namespaces); hint: run with sudo")
        sys.path.insert(0, os.path.join(ROOT, "bench", "dp_vs_ddp"))
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "ddp_bench", os.path.join(ROOT, "bench", "dp_vs_ddp", "run.py"))
        ddp = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ddp)
        sys.modules["ddp_bench"] = ddp
        a.log_dir = tempfile.mkdtemp(prefix="recsys-link-")
        link = ddp.Link()
        try:
            link.up()
            link.shape(1e9)
            rates = link.probe(1e9)
            print(f"link probe: {rates[0] / 1e9:.2f} and {rates[1] / 1e9:.2f} Gbit/s", flush=True)
            link.start_redis(os.path.join(a.log_dir, "redis.log"))
            for n in [x for x in procs if x >= 2 and x % 2 == 0]:
                c, t = [], []
                for r in range(a.repeats):
                    c.append(link_run(a, link, data, "cann", n, a.steps, f"c{n}-{r}-{os.getpid()}"))
                    t.append(link_run(a, link, data, "torch", n, a.steps, f"t{n}-{r}-{os.getpid()}"))
                link_rows.append((n, 2, c, t, os.getloadavg()[0]))
                print(f"{n} processes over the 1 Gbit/s link done", flush=True)
        finally:
            link.close()
    rows = []
    for n in procs:
        shards = 0 if n == 1 else max(1, n // 2)
        c, t = [], []
        for _ in range(a.repeats):
            c.append(cann_run(a, n, shards, a.steps))
            t.append(torch_run(a, data, n, a.steps))
        rows.append((n, shards, c, t, os.getloadavg()[0]))
        load.mark()
        print(f"{n} processes done", flush=True)
    os.remove(data)

    conv = cann_run(a, 1, 0, a.converge_steps)
    load.mark()
    ok = True
    v = Verdicts()
    if a.repeats < MIN_REPEATS:
        v.fail(f"only {a.repeats} repeats: the rules ask for at least {MIN_REPEATS}")
    samples = a.steps * a.batch
    print(f"\nrecsys: two-tower ({MODEL.replace(ROOT + '/', '')}), {a.steps} steps x {a.batch} "
          f"impressions, {EVAL_ROWS} held out, {a.repeats} repeats, {a.cores} cores")
    print(f"machine: {machine()}")
    for where, table in (("loopback", rows), ("two namespaces, 1 Gbit/s veth", link_rows)):
        if table:
            ok &= print_table(a, where, table, samples, v)
    gap = conv["ceiling"] - conv["auc"]
    v.judge(gap <= 0.01, f"after {a.converge_steps} steps ({a.converge_steps * a.batch} "
            f"impressions) cann-train's AUC {conv['auc']:.4f} is {gap:.4f} below the planted "
            f"ceiling {conv['ceiling']:.4f} (<= 0.01)")
    print("validation: " + ("ok (every run learned: AUC above 0.7)" if ok else "FAILED"))
    print("targets:")
    v.print(sys.stdout)
    print(load.line(max(procs) * 2))
    return v.exit_status(ok)


if __name__ == "__main__":
    sys.exit(main())
