"""The PyTorch peer of the training benchmark: the same GPT as model.yaml, trained the way
cann-train trains it, in eager PyTorch.

Same shapes (6 layers, hidden 384, 6 heads, sequence 256, byte vocabulary, tied head),
pre-LayerNorm blocks with tanh GELU, GPT-2 initialization, AdamW (betas 0.9/0.95, weight decay
0.1 on matrices), global-norm clipping at 1.0, linear warmup then cosine decay to 10%, random
256+1-byte windows of the fortunes text (the last twentieth held out), and at the end a
validation over --eval-batches (8) held-out batches, as cann-train's run does by default.
Prints one JSON object per step on stdout, and one with the validation loss. With
--autocast bf16 the forward runs under PyTorch's CPU autocast (bf16 matmuls, fp32 weights and
optimizer), its documented mixed-precision path.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads, seq, layers):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        for proj in (self.proj, self.fc_proj):
            nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, c, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList([Block(c, heads, seq, layers) for _ in range(layers)])
        self.lnf = nn.LayerNorm(c)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m not in [b.proj for b in self.blocks] + [
                b.fc_proj for b in self.blocks
            ]:
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def fortunes_bytes(path="/usr/share/games/fortunes"):
    data = bytearray()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.endswith(".dat") or os.path.islink(full) or not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            data += f.read()
    return torch.tensor(list(data), dtype=torch.long)


def held_out(data):
    """The training part and the validation part (the last twentieth) of the text."""
    n = len(data) * 19 // 20
    return data[:n], data[n:]


def evaluate(model, val, batches, batch_size, seq_len, generator, bf16=False):
    """The mean loss over `batches` random windows of the held-out text, as cann-train's
    validation at the end of a run computes it (--eval-batches, 8 by default)."""
    total = 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(batches):
            starts = torch.randint(0, len(val) - seq_len - 1, (batch_size,), generator=generator)
            window = torch.stack([val[s:s + seq_len + 1] for s in starts.tolist()])
            total += model(window[:, :-1], window[:, 1:]).item()
    return total / batches


def lr_at(step, lr, warmup, total):
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, max(0.0, (step - warmup) / max(1, total - warmup)))
    return 0.1 * lr + 0.9 * lr * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: the forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    p.add_argument("--eval-batches", type=int, default=8,
                   help="batches of the validation after the last step (cann-train's default)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data, val = held_out(fortunes_bytes())
    model = GPT(6, 384, 6, a.seq_len, 256)
    decay = [p for p in model.parameters() if p.dim() >= 2 and p is not model.wpe.weight]
    no_decay = [p for p in model.parameters() if p.dim() < 2 or p is model.wpe.weight]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    for step in range(a.steps):
        t0 = time.perf_counter()
        starts = torch.randint(0, len(data) - a.seq_len - 1, (a.batch_size,))
        window = torch.stack([data[s:s + a.seq_len + 1] for s in starts.tolist()])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = model(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        opt.step()
        dt = time.perf_counter() - t0
        print(json.dumps({"step": step + 1, "loss": loss.item(), "step_time_s": dt,
                          "tokens_per_s": a.batch_size * a.seq_len / dt}), flush=True)
    if a.eval_batches > 0:
        val_loss = evaluate(model, val, a.eval_batches, a.batch_size, a.seq_len,
                            torch.Generator().manual_seed(a.seed + 2), a.autocast == "bf16")
        print(json.dumps({"val_loss": val_loss}), flush=True)


if __name__ == "__main__":
    main()
