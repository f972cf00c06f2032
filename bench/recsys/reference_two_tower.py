#!/usr/bin/python3
"""The PyTorch peer of bench/recsys: the two-tower model of two_tower.yaml, trained on the
impressions dump_clicks wrote (the ones cann-train generates), data-parallel with DDP over Gloo.

Layout as PyTorch's documentation has it for sparse embeddings: nn.EmbeddingBag(sparse=True)
tables replicated on every rank, DDP averaging the dense and the sparse gradients, gradient
buckets as views (gradient_as_bucket_view=True), torch.set_num_threads(threads). The same
mathematics as cann-train: embeddings initialized uniform in +-sqrt(1/rows), layers N(0,
2/(in+out)) and biases N(0, 1/out), embedding rows updated by row-wise Adagrad (one accumulator
per row, as FBGEMM's and cann-train's), the towers by Adam; each rank trains its 1/P slice of
every global batch. Prints one JSON line from rank 0: samples, seconds (from the first import to
the end of evaluation), AUC and log loss on the held-out rows.

    reference_two_tower.py --data FILE --procs P --batch B --steps N [--threads T]

With RANK and WORLD_SIZE in the environment (and MASTER_ADDR, MASTER_PORT), it runs that one
rank instead of spawning --procs processes: the multi-node layout of the benchmark's shaped
link.
"""
import argparse
import json
import os
import sys
import time

T0 = time.time()

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def read_dump(path):
    with open(path, "rb") as f:
        head = f.read(4 + 4 + 8 + 8 + 4 + 4 + 4)
    assert head[:4] == b"CLK1", "not a dump_clicks file"
    train, evals = np.frombuffer(head[8:24], dtype=np.int64)
    dense, sparse = np.frombuffer(head[24:32], dtype=np.int32)
    row = np.dtype([("label", "<f4"), ("dense", "<f4", (int(dense),)), ("ids", "<i8", (int(sparse),))])
    rows = np.memmap(path, dtype=row, mode="r", offset=len(head))
    return rows[: int(train)], rows[int(train):int(train) + int(evals)]


def mlp(widths_in, widths):
    layers = []
    for i, w in enumerate(widths):
        lin = nn.Linear(widths_in, w)
        nn.init.normal_(lin.weight, 0.0, (2.0 / (widths_in + w)) ** 0.5)
        nn.init.normal_(lin.bias, 0.0, (1.0 / w) ** 0.5)
        layers.append(lin)
        if i + 1 < len(widths):
            layers.append(nn.ReLU())
        widths_in = w
    return nn.Sequential(*layers)


class TwoTower(nn.Module):
    def __init__(self, rows, dim, user_features, towers, temperature):
        super().__init__()
        self.tables = nn.ModuleList()
        for r in rows:
            t = nn.EmbeddingBag(r, dim, mode="sum", sparse=True)
            bound = (1.0 / r) ** 0.5
            nn.init.uniform_(t.weight, -bound, bound)
            self.tables.append(t)
        self.uf = user_features
        self.user = mlp(user_features * dim, towers)
        self.item = mlp((len(rows) - user_features) * dim, towers)
        self.t = temperature

    def forward(self, ids):
        offsets = torch.arange(ids.shape[0], dtype=torch.int64)
        pooled = [t(ids[:, f].contiguous(), offsets) for f, t in enumerate(self.tables)]
        u = self.user(torch.cat(pooled[: self.uf], dim=1))
        v = self.item(torch.cat(pooled[self.uf:], dim=1))
        return (u * v).sum(dim=1) / self.t


def rowwise_adagrad(tables, state, lr, eps=1e-8):
    with torch.no_grad():
        for t, acc in zip(tables, state):
            g = t.weight.grad.coalesce()
            idx, val = g.indices()[0], g.values()
            acc[idx] += val.pow(2).mean(dim=1)
            t.weight[idx] -= lr * val / (acc[idx].sqrt() + eps).unsqueeze(1)
            t.weight.grad = None


def auc(scores, labels):
    # Mann-Whitney U with ties at their average rank (the formula of cann-train's metrics.cc).
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    pos = labels > 0.5
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.procs > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(port))
        dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    train, evals = read_dump(args.data)
    model = TwoTower(args.rows, args.dim, args.user_features, args.towers, args.temperature)
    tables = list(model.tables)
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("tables")]
    if args.procs > 1:
        model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    adam = torch.optim.Adam(dense_params, lr=args.lr)
    state = [torch.zeros(t.weight.shape[0]) for t in tables]
    lossf = nn.BCEWithLogitsLoss()
    local = args.batch // args.procs
    first = last = None
    for step in range(args.steps):
        lo = step * args.batch + rank * local
        chunk = train[lo:lo + local]
        ids = torch.from_numpy(np.ascontiguousarray(chunk["ids"]))
        labels = torch.from_numpy(np.ascontiguousarray(chunk["label"]))
        loss = lossf(model(ids), labels)
        adam.zero_grad(set_to_none=True)
        loss.backward()
        adam.step()
        rowwise_adagrad(tables, state, args.sparse_lr)
        first = loss.item() if first is None else first
        last = loss.item()
    if rank == 0:
        with torch.no_grad():
            net = model.module if args.procs > 1 else model
            scores, labels = [], []
            for lo in range(0, len(evals), 8192):
                chunk = evals[lo:lo + 8192]
                scores.append(net(torch.from_numpy(np.ascontiguousarray(chunk["ids"]))).numpy())
                labels.append(np.asarray(chunk["label"]))
            s, y = np.concatenate(scores), np.concatenate(labels)
            p = 1.0 / (1.0 + np.exp(-s.astype(np.float64)))
            ll = float(-np.mean(y * np.log(np.clip(p, 1e-7, 1)) + (1 - y) * np.log(np.clip(1 - p, 1e-7, 1))))
            print(json.dumps({"samples": args.steps * args.batch, "seconds": time.time() - T0,
                              "auc": auc(s, y), "log_loss": ll, "first_loss": first,
                              "last_loss": last}), flush=True)
    if args.procs > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rows", default="5000,100,2000,100")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--user-features", type=int, default=2)
    ap.add_argument("--towers", default="128,64")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    args.rows = [int(x) for x in args.rows.split(",")]
    args.towers = [int(x) for x in args.towers.split(",")]
    if args.batch % args.procs:
        sys.exit("reference_two_tower: --batch must divide over --procs")
    if "RANK" in os.environ:
        # Started one process per rank by a launcher (one per node of a multi-node run), as
        # torchrun does: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment.
        args.procs = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), args, args.port)
    elif args.procs == 1:
        worker(0, args, args.port)
    else:
        mp.spawn(worker, args=(args, args.port), nprocs=args.procs)


if __name__ == "__main__":
    main()
