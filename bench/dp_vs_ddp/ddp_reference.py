"""The PyTorch DDP peer of the data-parallel benchmark: the GPT of bench/train_vs_pytorch
(reference_gpt.py, imported, not copied) trained with DistributedDataParallel over Gloo.

Each rank trains --batch-per-rank sequences of every step; the global batch is world size x
that. The global batch's windows are drawn from one generator seeded alike on every rank, and
rank r takes its slice, so a 2-rank run sees the data a 1-rank run with the same global batch
would. AdamW, clipping, weight decay and the warmup + cosine schedule are reference_gpt.py's.
One thread per rank. Rank 0 prints one JSON object per step (step, loss averaged over ranks,
step_time_s, tokens_per_s of the global batch, tokens).

Placement comes from the environment, as torchrun gives it: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (and GLOO_SOCKET_IFNAME to pin Gloo to one interface). WORLD_SIZE unset or 1 is the
compute-only baseline: plain PyTorch, no process group, no DDP.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 python3 ddp_reference.py --steps 20
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # keep the shared reference's folder free of __pycache__
# torch.set_num_threads(1) alone leaves OpenBLAS its own pool (one thread per core): a "1 thread"
# rank would use every core. These must be set before torch loads.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_vs_pytorch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from reference_gpt import GPT, evaluate, fortunes_bytes, held_out, lr_at  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--layers", type=int, default=6, help="transformer blocks (hidden 384 each)")
    p.add_argument("--batch-per-rank", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--eval-batches", type=int, default=8,
                   help="batches per rank of the validation after the last step (cann-train's "
                        "default)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a collective may wait")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    p.add_argument("--no-bucket-view", action="store_true",
                   help="gradient_as_bucket_view=False (PyTorch's default; its documentation "
                        "recommends True, which saves a copy of every gradient)")
    a = p.parse_args()

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel call; harmless
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=a.timeout))

    torch.manual_seed(a.seed)
    data, val = held_out(fortunes_bytes())
    model = GPT(a.layers, 384, 6, a.seq_len, 256)
    # The same parameter groups as reference_gpt.py: decay on matrices except the positions.
    decay = [q for q in model.parameters() if q.dim() >= 2 and q is not model.wpe.weight]
    no_decay = [q for q in model.parameters() if q.dim() < 2 or q is model.wpe.weight]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    # The causal-mask buffers never change, so DDP need not re-broadcast them every forward.
    net = (DistributedDataParallel(model, broadcast_buffers=False, bucket_cap_mb=a.bucket_cap_mb,
                                   gradient_as_bucket_view=not a.no_bucket_view)
           if world > 1 else model)

    global_batch = a.batch_per_rank * world
    sampler = torch.Generator().manual_seed(a.seed + 1)
    if world > 1:
        dist.barrier()
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = torch.randint(0, len(data) - a.seq_len - 1, (global_batch,), generator=sampler)
        mine = starts[rank * a.batch_per_rank:(rank + 1) * a.batch_per_rank].tolist()
        window = torch.stack([data[s:s + a.seq_len + 1] for s in mine])
        loss = net(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces gradient buckets as backward produces them
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        opt.step()
        mean_loss = loss.detach().clone()
        if world > 1:  # the logged loss is the global batch's, as cann-train logs it
            dist.all_reduce(mean_loss)
            mean_loss /= world
        dt = time.perf_counter() - t0
        if rank == 0:
            tokens = global_batch * a.seq_len
            print(json.dumps({"step": step + 1, "loss": mean_loss.item(), "step_time_s": dt,
                              "tokens_per_s": tokens / dt, "tokens": tokens}), flush=True)
    if a.eval_batches > 0:
        # Every rank scores its own batches, the mean over ranks reported, as cann-train does.
        val_loss = torch.tensor(evaluate(model, val, a.eval_batches, a.batch_per_rank, a.seq_len,
                                         torch.Generator().manual_seed(a.seed + 2 + rank)))
        if world > 1:
            dist.all_reduce(val_loss)
            val_loss /= world
        if rank == 0:
            print(json.dumps({"val_loss": val_loss.item()}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
