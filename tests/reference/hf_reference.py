#!/usr/bin/env python3
"""A plain-PyTorch reference for cann-train's Hugging Face families.

Reads a model directory (config.json and *.safetensors, one file or shards behind
model.safetensors.index.json; the header is parsed here, no safetensors package), runs one
forward and backward on the training windows of an llm.c token shard, and writes the logits,
the loss and every parameter's gradient (by Hugging Face name) to a safetensors file.

The windows are cann-train's sampler's: a stream of n tokens holds B = (n - 1) // T windows at
offsets 0, T, 2T, ...; window b's inputs are tokens[bT : bT+T] and its targets the next T. The
loss is cann-train's: the mean cross-entropy over all B*T positions plus router_aux_loss_coef
times the sum over MoE layers of each layer's balance loss; the gradients are of that loss.

The blocks follow the published model definitions (transformers' modeling_gpt2, modeling_llama,
modeling_mistral, modeling_qwen2, modeling_qwen3, modeling_mixtral, modeling_qwen2_moe,
modeling_qwen3_moe; deepseek-ai's modeling_deepseek.py for DeepSeek-V2/V3), written out here in
float32 torch: RMSNorm, rotary embeddings (default, linear, llama3, yarn), grouped-query
attention with optional QK-norm, SwiGLU MLPs, softmax routers with optional renormalization,
Qwen2-MoE's gated shared expert, and DeepSeek's multi-head latent attention, shared experts,
sigmoid scores with the selection-only correction bias, group-limited top-k and dense first
layers.

usage: hf_reference.py MODEL_DIR --data TRAIN.bin --seq-len T --out OUT.safetensors
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


# ---------------------------------------------------------------- safetensors, by hand


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=dtype) if end > b else \
            torch.zeros(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).to(torch.float32)
    return out


def read_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(model_dir, name)))
    return weights


def write_safetensors(path, tensors):
    header, chunks, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        chunks.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def read_shard(path):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 ids."""
    with open(path, "rb") as f:
        blob = f.read()
    magic, version, count = struct.unpack("<3i", blob[:12])
    if magic != 20240520 or version != 1:
        sys.exit(f"{path}: not an llm.c token shard")
    return torch.tensor(struct.unpack(f"<{count}H", blob[1024:1024 + 2 * count]), dtype=torch.long)


# ---------------------------------------------------------------- config


class Config:
    def __init__(self, raw):
        self.raw = raw
        self.family = raw.get("model_type") or {"gpt": "gpt2"}.get(raw.get("architecture"))
        if self.family is None:
            sys.exit("config.json names no model_type this reference knows")

    def get(self, key, default=None, *aliases):
        for k in (key,) + aliases:
            if k in self.raw and self.raw[k] is not None:
                return self.raw[k]
        return default


# ---------------------------------------------------------------- blocks


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(c, dim, T):
    """cos, sin of shape (T, dim) and the attention-score factor, per modeling_rope_utils."""
    theta = c.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    factor = rs.get("factor", 1.0)
    score = 1.0
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        lo, hi = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    elif kind == "yarn":
        old = rs.get("original_max_position_embeddings") or c.get("max_position_embeddings")
        fast, slow = rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0)

        def corr(rot):
            return dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr(fast), corr(slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrap = 1 - ramp
        inv = (inv / factor) * (1 - extrap) + inv * extrap
        m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
        if c.family.startswith("deepseek"):
            # DeepSeek: cos/sin scaled by mscale/mscale_all_dim, scores by mscale_all_dim^2.
            attn = yarn_mscale(factor, m or 1.0) / yarn_mscale(factor, m_all or 0.0)
            score = yarn_mscale(factor, m_all or 0.0) ** 2
        else:
            attn = rs.get("attention_factor") or yarn_mscale(factor)
        pos = torch.arange(T, dtype=torch.float64)
        f = torch.outer(pos, inv)
        emb = torch.cat((f, f), dim=-1)
        return (emb.cos() * attn).float(), (emb.sin() * attn).float(), score
    elif kind != "default":
        sys.exit(f"rope_scaling {kind} is not in this reference")
    pos = torch.arange(T, dtype=torch.float64)
    f = torch.outer(pos, inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().float(), emb.sin().float(), score


def attention_core(q, k, v, scale):
    # q (B,H,T,D), k (B,H,T,D), v (B,H,T,Dv): causal softmax attention.
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def swiglu(W, p, x, names=("gate_proj", "up_proj", "down_proj")):
    g, u, d = (p + n for n in names)
    y = F.silu(F.linear(x, W[g + ".weight"], W.get(g + ".bias"))) * \
        F.linear(x, W[u + ".weight"], W.get(u + ".bias"))
    return F.linear(y, W[d + ".weight"], W.get(d + ".bias"))


# ---------------------------------------------------------------- model


class Model:
    def __init__(self, c, W):
        self.c, self.W = c, W
        self.aux_total = None

    def heads(self):
        c = self.c
        H = c.get("num_attention_heads")
        return H, c.get("num_key_value_heads", H), c.get("head_dim", c.get("hidden_size") // H)

    def gqa(self, p, x, cos, sin):
        c, W = self.c, self.W
        B, T, _ = x.shape
        H, KV, D = self.heads()
        a = p + "self_attn."
        q = F.linear(x, W[a + "q_proj.weight"], W.get(a + "q_proj.bias")).view(B, T, H, D)
        k = F.linear(x, W[a + "k_proj.weight"], W.get(a + "k_proj.bias")).view(B, T, KV, D)
        v = F.linear(x, W[a + "v_proj.weight"], W.get(a + "v_proj.bias")).view(B, T, KV, D)
        if a + "q_norm.weight" in W:  # Qwen3: RMSNorm over each head before the rotation
            q = rms_norm(q, W[a + "q_norm.weight"], c.get("rms_norm_eps"))
            k = rms_norm(k, W[a + "k_norm.weight"], c.get("rms_norm_eps"))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        y = attention_core(q, k, v, 1.0 / math.sqrt(D)).transpose(1, 2).reshape(B, T, H * D)
        return F.linear(y, W[a + "o_proj.weight"], W.get(a + "o_proj.bias"))

    def mla(self, p, x, cos, sin, score):
        c, W = self.c, self.W
        B, T, _ = x.shape
        H = c.get("num_attention_heads")
        nope, rope, vd = c.get("qk_nope_head_dim"), c.get("qk_rope_head_dim"), c.get("v_head_dim")
        rank, eps = c.get("kv_lora_rank"), c.get("rms_norm_eps")
        a = p + "self_attn."
        if c.get("q_lora_rank"):
            qa = F.linear(x, W[a + "q_a_proj.weight"], W.get(a + "q_a_proj.bias"))
            q = F.linear(rms_norm(qa, W[a + "q_a_layernorm.weight"], eps), W[a + "q_b_proj.weight"])
        else:
            q = F.linear(x, W[a + "q_proj.weight"])
        q = q.view(B, T, H, nope + rope).transpose(1, 2)
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        ckv = F.linear(x, W[a + "kv_a_proj_with_mqa.weight"], W.get(a + "kv_a_proj_with_mqa.bias"))
        latent, k_pe = ckv[..., :rank], ckv[..., rank:].view(B, 1, T, rope)
        kv = F.linear(rms_norm(latent, W[a + "kv_a_layernorm.weight"], eps), W[a + "kv_b_proj.weight"])
        kv = kv.view(B, T, H, nope + vd).transpose(1, 2)
        k_nope, v = kv[..., :nope], kv[..., nope:]

        def rot(t):  # DeepSeek's: de-interleave the pairs, then rotate halves
            if c.get("rope_interleave", True):
                b, h, s, d = t.shape
                t = t.reshape(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
            return t * cos + rotate_half(t) * sin

        q_pe, k_pe = rot(q_pe), rot(k_pe)
        qf = torch.cat((q_nope, q_pe), dim=-1)
        kf = torch.cat((k_nope, k_pe.expand(B, H, T, rope)), dim=-1)
        y = attention_core(qf, kf, v, score / math.sqrt(nope + rope))
        y = y.transpose(1, 2).reshape(B, T, H * vd)
        return F.linear(y, W[a + "o_proj.weight"], W.get(a + "o_proj.bias"))

    def moe_layer(self, l):
        c, f = self.c, self.c.family
        E = c.get("n_routed_experts", 0, "num_experts", "num_local_experts")
        if not E:
            return False
        if f == "mixtral":
            return True
        if f in ("qwen2_moe", "qwen3_moe"):
            step = c.get("decoder_sparse_step", 1)
            return l not in (c.get("mlp_only_layers") or []) and (l + 1) % step == 0
        if f.startswith("deepseek"):
            return l >= c.get("first_k_dense_replace", 0) and l % c.get("moe_layer_freq", 1) == 0
        sys.exit(f"{f}: MoE placement unknown")

    def route(self, m, x):
        """(N,C) -> chosen experts (N,K), their weights (N,K), and the layer's balance loss."""
        c, W, f = self.c, self.W, self.c.family
        E = c.get("n_routed_experts", 0, "num_experts", "num_local_experts")
        K = c.get("num_experts_per_tok")
        logits = F.linear(x, W[m + "gate.weight"])
        sigmoid = c.get("scoring_func", "softmax") == "sigmoid"
        scores = logits.sigmoid() if sigmoid else torch.softmax(logits, dim=-1)
        choice = scores.detach()
        method = c.get("topk_method", "greedy")
        if method == "noaux_tc":
            choice = choice + W[m + "gate.e_score_correction_bias"]
        if method in ("group_limited_greedy", "noaux_tc"):
            G, keep = c.get("n_group"), c.get("topk_group")
            grouped = choice.view(-1, G, E // G)
            gs = grouped.max(-1).values if method == "group_limited_greedy" else \
                grouped.topk(2, dim=-1).values.sum(-1)
            top = gs.topk(keep, dim=-1).indices
            allowed = torch.zeros_like(gs, dtype=torch.bool).scatter(1, top, True)
            allowed = allowed.unsqueeze(-1).expand_as(grouped).reshape(-1, E)
            choice = choice.masked_fill(~allowed, float("-inf"))
        idx = choice.topk(K, dim=-1).indices
        w = scores.gather(1, idx)
        if f == "mixtral":
            w = w / w.sum(-1, keepdim=True)
        elif f.startswith("deepseek"):
            if K > 1 and c.get("norm_topk_prob", False):
                w = w / (w.sum(-1, keepdim=True) + 1e-20)
            if f == "deepseek_v3" or not (K > 1 and c.get("norm_topk_prob", False)):
                w = w * c.get("routed_scaling_factor", 1.0)
        elif c.get("norm_topk_prob", False):
            w = w / w.sum(-1, keepdim=True)
        return idx, w, self.balance_loss(scores, idx, E, K)

    def balance_loss(self, scores, idx, E, K):
        if self.c.get("seq_aux", False):  # DeepSeek's per-sequence loss
            B = self.batch
            s = scores.view(B, -1, E)
            T = s.shape[1]
            counts = torch.zeros(B, E).scatter_add(1, idx.view(B, -1), torch.ones(B, T * K))
            ce = counts / (T * K / E)
            return (ce * s.mean(dim=1)).sum(dim=1).mean()
        # Switch / Mixtral: E * sum_k sum_e (share of tokens whose k-th choice is e) * mean P_e
        mask = F.one_hot(idx, E).float()  # (N,K,E)
        return E * (mask.mean(0) * scores.mean(0).unsqueeze(0)).sum()

    def moe(self, p, x):
        c, W, f = self.c, self.W, self.c.family
        B, T, C = x.shape
        m = p + ("block_sparse_moe." if f == "mixtral" else "mlp.")
        h = x.reshape(-1, C)
        idx, w, aux = self.route(m, h)
        self.aux_total = aux if self.aux_total is None else self.aux_total + aux
        out = torch.zeros_like(h)
        names = ("w1", "w3", "w2") if f == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        E = c.get("n_routed_experts", 0, "num_experts", "num_local_experts")
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = swiglu(W, f"{m}experts.{e}.", h[tok], names)
            out = out.index_add(0, tok, y * w[tok, slot].unsqueeze(-1))
        if m + "shared_experts.gate_proj.weight" in W:  # DeepSeek
            out = out + swiglu(W, m + "shared_experts.", h)
        if m + "shared_expert.gate_proj.weight" in W:  # Qwen2-MoE, gated
            g = torch.sigmoid(F.linear(h, W[m + "shared_expert_gate.weight"]))
            out = out + g * swiglu(W, m + "shared_expert.", h)
        return out.view(B, T, C)

    def forward(self, tokens):
        c, W = self.c, self.W
        if c.family == "gpt2":
            return self.gpt2(tokens)
        B, T = tokens.shape
        self.batch = B
        eps = c.get("rms_norm_eps", 1e-6)
        if c.family.startswith("deepseek"):
            cos, sin, score = rope_tables(c, c.get("qk_rope_head_dim"), T)
        else:
            cos, sin, score = rope_tables(c, self.heads()[2], T)
        x = W["model.embed_tokens.weight"][tokens]
        for l in range(c.get("num_hidden_layers")):
            p = f"model.layers.{l}."
            h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
            if c.family.startswith("deepseek"):
                x = x + self.mla(p, h, cos, sin, score)
            else:
                x = x + self.gqa(p, h, cos, sin)
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            x = x + (self.moe(p, h) if self.moe_layer(l) else swiglu(W, p + "mlp.", h))
        x = rms_norm(x, W["model.norm.weight"], eps)
        head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
        return F.linear(x, head)

    def gpt2(self, tokens):
        c, W = self.c, self.W
        B, T = tokens.shape
        C, H = c.get("hidden_size"), c.get("num_attention_heads")
        eps = c.get("layer_norm_epsilon", 1e-5)
        ln = lambda x, n: F.layer_norm(x, (C,), W[n + ".weight"], W[n + ".bias"], eps)
        x = W["transformer.wte.weight"][tokens] + W["transformer.wpe.weight"][:T]
        for l in range(c.get("num_hidden_layers")):
            p = f"transformer.h.{l}."
            # Conv1D: y = x @ W + b with W stored (in, out).
            qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=-1))
            y = attention_core(q, k, v, 1.0 / math.sqrt(C // H)).transpose(1, 2).reshape(B, T, C)
            x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
            h = ln(x, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
            h = F.gelu(h, approximate="tanh")
            x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        x = ln(x, "transformer.ln_f")
        return F.linear(x, W["transformer.wte.weight"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--data", required=True, help="llm.c token shard: the training stream")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    with open(os.path.join(a.model_dir, "config.json")) as f:
        c = Config(json.load(f))
    W = read_weights(a.model_dir)
    buffers = {n for n in W if n.endswith("e_score_correction_bias")}
    for n, t in W.items():
        if n not in buffers:
            t.requires_grad_(True)
    tokens = read_shard(a.data)
    T = a.seq_len
    B = (tokens.numel() - 1) // T
    inputs = torch.stack([tokens[b * T:b * T + T] for b in range(B)])
    targets = torch.stack([tokens[b * T + 1:b * T + T + 1] for b in range(B)])
    model = Model(c, W)
    logits = model.forward(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    coef = c.get("router_aux_loss_coef", 0.0)
    if c.family in ("mixtral", "qwen2_moe", "qwen3_moe") and not c.get("output_router_logits"):
        coef = 0.0
    if model.aux_total is not None and coef:
        loss = loss + coef * model.aux_total
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for n, t in W.items():
        if n not in buffers:
            out["grad." + n] = t.grad if t.grad is not None else torch.zeros_like(t)
    write_safetensors(a.out, out)
    print(f"loss {loss.item():.6f}, {B} windows of {T}, {len(out) - 2} gradients -> {a.out}")


if __name__ == "__main__":
    main()
