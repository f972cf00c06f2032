"""The torchrun peer of the recovery benchmark: a small GPT (reference_gpt.py's, 2 layers,
hidden 64, sequence 32, byte vocabulary) trained with DistributedDataParallel over Gloo, the
way a torchrun job survives failures: a checkpoint every step (torch.save to a temporary, then
an atomic rename, by rank 0), and on every (re)start the newest checkpoint is loaded.

Rank 0 appends one JSON object per line to --log: {"step", "time"} per completed step, and
{"event": "restored", "step", "time"} and {"event": "rendezvous", "time"} at a (re)start, with
"restart" = TORCHELASTIC_RESTART_COUNT. Placement comes from torchrun's environment.

    torchrun --standalone --nproc_per_node 2 --max_restarts 3 --redirects 2 --tee 2 \
        --log_dir DIR ddp_resume.py --steps 300 --ckpt DIR/ck.pt --log DIR/log.jsonl
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.dont_write_bytecode = True
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_vs_pytorch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from reference_gpt import GPT, fortunes_bytes, lr_at  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--pg-timeout", type=float, default=60.0,
                   help="seconds a Gloo collective waits for a peer before the worker fails")
    a = p.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.pg_timeout))
    out = open(a.log, "a") if rank == 0 else None

    def emit(obj):
        if out is not None:
            obj["restart"] = restart
            out.write(json.dumps(obj) + "\n")
            out.flush()

    emit({"event": "rendezvous", "time": time.time()})
    torch.manual_seed(1337)
    data = fortunes_bytes()
    model = GPT(2, 64, 2, a.seq_len, 256)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sampler = torch.Generator().manual_seed(1338)
    start = 0
    if os.path.exists(a.ckpt):
        ck = torch.load(a.ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sampler.set_state(ck["sampler"])
        start = ck["step"]
        emit({"event": "restored", "step": start, "time": time.time()})
    net = DistributedDataParallel(model, broadcast_buffers=False)
    per_rank = a.global_batch // world
    for step in range(start, a.steps):
        starts = torch.randint(0, len(data) - a.seq_len - 1, (a.global_batch,), generator=sampler)
        mine = starts[rank * per_rank:(rank + 1) * per_rank].tolist()
        window = torch.stack([data[s:s + a.seq_len + 1] for s in mine])
        loss = net(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 2e-3, 10, a.steps)
        opt.step()
        if rank == 0:
            tmp = a.ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "sampler": sampler.get_state(), "step": step + 1}, tmp)
            os.replace(tmp, a.ckpt)
        dist.barrier()  # the checkpoint of this step exists before anyone starts the next
        emit({"step": step + 1, "loss": loss.item(), "time": time.time()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
