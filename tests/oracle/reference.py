#!/usr/bin/env python3
"""PyTorch reference ("oracle") for the tidal training engine.

Usage:
    python3 reference.py CASE IN.safetensors OUT.safetensors

Reads the input tensors and string metadata from IN, computes the reference result
in float32 with PyTorch (CPU) and writes the output tensors to OUT (float32 unless
stated otherwise). Upstream gradients are given as the input `dy`; gradients are
computed with autograd.

Exit codes: 0 success; 2 unknown case, missing/invalid input or metadata.

Conventions:
  * metadata values are strings; ints/floats/bools ("0"/"1") are parsed here;
  * integer inputs arrive as int32 and are converted with .long() where indices are needed;
  * scalar results (losses, norms) are written with shape [1];
  * GELU is the tanh approximation, except where a case's metadata says form=erf;
  * the number of CPU threads is 2 (override with env TIDAL_ORACLE_THREADS).
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402


class OracleInputError(Exception):
    """Bad or missing input tensor / metadata (exit code 2)."""


# --------------------------------------------------------------------------- helpers


class Inputs:
    """Access to the input tensors and metadata with clear errors."""

    def __init__(self, tensors, meta):
        self.tensors = tensors
        self.meta = meta

    def has(self, name):
        return name in self.tensors

    def f32(self, name, grad=False):
        t = self.raw(name).to(torch.float32).clone()
        if grad:
            t.requires_grad_(True)
        return t

    def long(self, name):
        return self.raw(name).long()

    def raw(self, name):
        if name not in self.tensors:
            raise OracleInputError(f"missing input tensor {name!r}")
        return self.tensors[name]

    def _meta(self, key):
        if key not in self.meta:
            raise OracleInputError(f"missing metadata key {key!r}")
        return self.meta[key]

    def int(self, key, default=None):
        if default is not None and key not in self.meta:
            return default
        try:
            return int(self._meta(key))
        except ValueError:
            raise OracleInputError(f"metadata {key!r}={self.meta[key]!r} is not an int")

    def float(self, key, default=None):
        if default is not None and key not in self.meta:
            return default
        try:
            return float(self._meta(key))
        except ValueError:
            raise OracleInputError(f"metadata {key!r}={self.meta[key]!r} is not a float")

    def bool(self, key, default=None):
        if default is not None and key not in self.meta:
            return default
        v = self._meta(key).strip().lower()
        if v in ("1", "true"):
            return True
        if v in ("0", "false"):
            return False
        raise OracleInputError(f"metadata {key!r}={self.meta[key]!r} is not a bool (0/1)")


def out32(t):
    """Detached, contiguous float32 copy for output."""
    return t.detach().to(torch.float32).contiguous().clone()


def scalar1(t):
    return out32(t).reshape(1)


# --------------------------------------------------------------------------- shared ops


def masked_scores(qkv, n_head, causal, key_mask=None, n_kv_head=None, doc_positions=None):
    """The scaled scores [B, H, T, T] of a fused qkv [B, T, (H + 2 Hkv) hs], masked keys at -inf,
    and v [B, H, T, hs] (each query head's values).

    The last dim holds the H query heads, then Hkv key heads, then Hkv value heads (Hkv =
    n_kv_head, default n_head: the plain [q | k | v] of width 3C). Query head h attends with kv
    head h % Hkv (grouped-query attention, ops/attention.h). That is not torch's
    repeat_interleave order (h // (H / Hkv)), so the index is built explicitly.
    key_mask: optional [B, T] (1 = real token, 0 = padding); padded keys get -inf.
    doc_positions: optional [B, T], each token's position in its document (0 starts one): a
    query's keys outside its document get -inf (the block-diagonal mask of packed documents).
    """
    B, T, width = qkv.shape
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    heads = n_head + 2 * n_kv_head
    if n_kv_head <= 0 or n_head % n_kv_head != 0 or width % heads != 0:
        raise OracleInputError(f"qkv last dim {width} incompatible with n_head={n_head} n_kv_head={n_kv_head}")
    hs = width // heads
    q, k, v = qkv.split([n_head * hs, n_kv_head * hs, n_kv_head * hs], dim=-1)
    q = q.reshape(B, T, n_head, hs).transpose(1, 2)  # [B, H, T, hs]
    kv_of = torch.arange(n_head) % n_kv_head  # query head h -> kv head h % Hkv
    k = k.reshape(B, T, n_kv_head, hs).transpose(1, 2).index_select(1, kv_of)  # [B, H, T, hs]
    v = v.reshape(B, T, n_kv_head, hs).transpose(1, 2).index_select(1, kv_of)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # [B, H, T, T]
    if causal:
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    if key_mask is not None:
        pad = (key_mask == 0).view(B, 1, 1, T)
        scores = scores.masked_fill(pad, float("-inf"))
    if doc_positions is not None:
        document = torch.cumsum((doc_positions == 0).long(), dim=1)  # [B, T]: a number per document
        other = document.view(B, 1, T, 1) != document.view(B, 1, 1, T)
        scores = scores.masked_fill(other, float("-inf"))
    return scores, v


def attention(qkv, n_head, causal, key_mask=None, n_kv_head=None, doc_positions=None):
    """Multi-head (or grouped-query) attention on a fused qkv [B, T, (H + 2 Hkv) hs] -> [B, T, H hs].

    y's heads are grouped by kv head (ops/attention.h output_head): query head h = i Hkv + g, the
    i-th of kv head g's, goes to slot g (H / Hkv) + i."""
    B, T, _ = qkv.shape
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    scores, v = masked_scores(qkv, n_head, causal, key_mask, n_kv_head, doc_positions)
    att = F.softmax(scores, dim=-1)
    y = att @ v  # [B, H, T, hs]
    slot = torch.tensor([(h % n_kv_head) * (n_head // n_kv_head) + h // n_kv_head for h in range(n_head)])
    y = torch.empty_like(y).index_copy(1, slot, y)  # y[:, slot[h]] = y[:, h]
    return y.transpose(1, 2).reshape(B, T, n_head * v.shape[-1])


def gelu(x):
    return F.gelu(x, approximate="tanh")


# --------------------------------------------------------------------------- op cases


def case_gemm(inp):
    """Inputs A, B, C0 (C0 optional: zeros if absent); meta transa, transb ("0"/"1"),
    alpha, beta. A is [m,k] ([k,m] if transa), optionally with a leading batch dim
    shared by B and C0. Output C = alpha * op(A) @ op(B) + beta * C0 (op transposes
    the last two dims)."""
    A = inp.f32("A")
    B = inp.f32("B")
    if inp.bool("transa"):
        A = A.transpose(-2, -1)
    if inp.bool("transb"):
        B = B.transpose(-2, -1)
    alpha = inp.float("alpha")
    beta = inp.float("beta")
    C = alpha * (A @ B)
    if inp.has("C0"):
        C = C + beta * inp.f32("C0")
    return {"C": out32(C)}


def case_bias(inp):
    """Inputs x [N, C], b [C], dy [N, C]. Outputs y = x + b, dx, db."""
    x = inp.f32("x", grad=True)
    b = inp.f32("b", grad=True)
    y = x + b
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dx": out32(x.grad), "db": out32(b.grad)}


def case_layernorm(inp):
    """Inputs x [N, C], w [C], b [C], dy [N, C]; meta eps. Outputs y, dx, dw, db,
    mean [N], rstd [N] (rstd = 1/sqrt(biased var + eps))."""
    eps = inp.float("eps")
    x = inp.f32("x", grad=True)
    w = inp.f32("w", grad=True)
    b = inp.f32("b", grad=True)
    y = F.layer_norm(x, (x.shape[-1],), w, b, eps)
    y.backward(inp.f32("dy"))
    with torch.no_grad():
        mean = x.mean(dim=-1)
        var = x.var(dim=-1, unbiased=False)
        rstd = torch.rsqrt(var + eps)
    return {"y": out32(y), "dx": out32(x.grad), "dw": out32(w.grad), "db": out32(b.grad),
            "mean": out32(mean), "rstd": out32(rstd)}


def case_gelu(inp):
    """Inputs x, dy; metadata form (tanh, the default, or erf). Outputs y = gelu(x), dx."""
    x = inp.f32("x", grad=True)
    form = inp.meta.get("form", "tanh")
    if form not in ("tanh", "erf"):
        raise OracleInputError(f"metadata form={form!r} is not tanh or erf")
    y = gelu(x) if form == "tanh" else F.gelu(x)
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dx": out32(x.grad)}


def case_softmax(inp):
    """Inputs x [N, C], dy. Outputs y = softmax(x, dim=-1), dx."""
    x = inp.f32("x", grad=True)
    y = F.softmax(x, dim=-1)
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dx": out32(x.grad)}


def case_attention(inp):
    """Inputs qkv [B, T, (H + 2 Hkv) hs], dy [B, T, H hs], optional key_mask [B, T] int32 (1 real,
    0 pad), optional doc_positions [B, T] int32 (positions in packed documents); meta n_head, causal, optional n_kv_head (Hkv, default n_head). Outputs y [B, T, H hs],
    dqkv like qkv (a kv head's gradient summed over the query heads that use it) and lse
    [B, H, T], the log-sum-exp of each query's attended scores (the flash-style forward's saved
    state)."""
    qkv = inp.f32("qkv", grad=True)
    key_mask = inp.long("key_mask") if inp.has("key_mask") else None
    docs = inp.long("doc_positions") if inp.has("doc_positions") else None
    n_head = inp.int("n_head")
    n_kv_head = inp.int("n_kv_head", n_head)
    y = attention(qkv, n_head, inp.bool("causal"), key_mask, n_kv_head, docs)
    y.backward(inp.f32("dy"))
    with torch.no_grad():
        scores = masked_scores(qkv, n_head, inp.bool("causal"), key_mask, n_kv_head, docs)[0]
        lse = torch.logsumexp(scores, dim=-1)
    return {"y": out32(y), "dqkv": out32(qkv.grad), "lse": out32(lse)}


def case_embedding(inp):
    """Inputs tokens [B, T] int32, wte [V, C], wpe [Tmax, C], dy [B, T, C].
    Outputs y = wte[tokens] + wpe[:T], dwte [V, C], dwpe [Tmax, C] (zero past T)."""
    tokens = inp.long("tokens")
    wte = inp.f32("wte", grad=True)
    wpe = inp.f32("wpe", grad=True)
    T = tokens.shape[1]
    if T > wpe.shape[0]:
        raise OracleInputError(f"T={T} exceeds wpe rows {wpe.shape[0]}")
    y = F.embedding(tokens, wte) + F.embedding(torch.arange(T), wpe)
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dwte": out32(wte.grad), "dwpe": out32(wpe.grad)}


def case_cross_entropy(inp):
    """Inputs logits [N, V], targets [N] int32 (-100 = ignore). Outputs loss [1]
    (mean over non-ignored), dlogits [N, V]."""
    logits = inp.f32("logits", grad=True)
    targets = inp.long("targets")
    loss = F.cross_entropy(logits, targets, ignore_index=-100)
    loss.backward()
    return {"loss": scalar1(loss), "dlogits": out32(logits.grad)}


def case_cast(inp):
    """Input x fp32 [N]. Outputs bf16 (BF16), f16 (F16), bf16_back, f16_back (fp32)."""
    x = inp.f32("x")
    bf = x.to(torch.bfloat16)
    hf = x.to(torch.float16)
    return {"bf16": bf.contiguous(), "f16": hf.contiguous(),
            "bf16_back": out32(bf), "f16_back": out32(hf)}


# QLoRA's NF4 values (Dettmers et al. 2023, appendix E), as bitsandbytes holds them.
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def dynamic_map():
    """bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        boundaries = torch.linspace(0.1, 1, 2 ** i + 1)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256
    return torch.tensor(sorted(data), dtype=torch.float32)


def nearest(x, values):
    """The index of the nearest of `values` to each of x (the first of equally near), in float64."""
    return (x.double().unsqueeze(-1) - values.double()).abs().argmin(dim=-1)


def blockwise(x, block, values):
    """x [n] in blocks of `block`: each block's absolute maximum, and each element times its reciprocal
    (in float32, as bitsandbytes scales) mapped to the nearest of `values`."""
    n = x.numel()
    blocks = (n + block - 1) // block
    padded = torch.zeros(blocks * block, dtype=torch.float32)
    padded[:n] = x
    padded = padded.view(blocks, block)
    absmax = padded.abs().max(dim=1).values
    scaled = padded * (1.0 / absmax).unsqueeze(1)
    return absmax, nearest(scaled, values).reshape(-1)[:n]


def case_nf4(inp):
    """Input x fp32 (any shape). QLoRA's NF4 with double quantization, as bitsandbytes stores it:
    codes (U8, two a byte, the first in the high nibble) of the nearest NF4 value to each element
    over its block of 64's absmax; the absmax values less their mean (offset), in blocks of 256, each
    the nearest of bitsandbytes' signed dynamic 8-bit code (absmax_codes, U8) over its block's
    maximum (absmax_scales)."""
    x = inp.f32("x").reshape(-1)
    absmax, codes = blockwise(x, 64, torch.tensor(NF4, dtype=torch.float32))
    if codes.numel() % 2:
        codes = torch.cat([codes, torch.zeros(1, dtype=codes.dtype)])
    packed = (codes[0::2] << 4) | codes[1::2]
    offset = torch.tensor([absmax.double().mean().item()], dtype=torch.float32)
    scales, absmax_codes = blockwise(absmax - offset, 256, dynamic_map())
    return {"codes": packed.to(torch.uint8).contiguous(), "absmax_codes": absmax_codes.to(torch.uint8).contiguous(),
            "absmax_scales": scales.contiguous(), "offset": offset}


def _steps_of(grads, p0):
    if grads.dim() != 2 or grads.shape[1] != p0.shape[0]:
        raise OracleInputError(f"grads shape {list(grads.shape)} must be [S, {p0.shape[0]}]")
    return grads.shape[0]


def case_adamw(inp):
    """Inputs p0 [N], grads [S, N]; meta lr, beta1, beta2, eps, weight_decay.
    Runs torch.optim.AdamW for S steps (step s uses grads[s]).
    Outputs p, m (exp_avg), v (exp_avg_sq)."""
    p = nn.Parameter(inp.f32("p0"))
    grads = inp.f32("grads")
    opt = torch.optim.AdamW([p], lr=inp.float("lr"),
                            betas=(inp.float("beta1"), inp.float("beta2")),
                            eps=inp.float("eps"), weight_decay=inp.float("weight_decay"))
    for s in range(_steps_of(grads, p)):
        p.grad = grads[s].clone()
        opt.step()
    st = opt.state[p]
    m = st["exp_avg"] if st else torch.zeros_like(p)
    v = st["exp_avg_sq"] if st else torch.zeros_like(p)
    return {"p": out32(p), "m": out32(m), "v": out32(v)}


def case_sgd(inp):
    """Inputs p0 [N], grads [S, N]; meta lr, momentum, weight_decay.
    Runs torch.optim.SGD (dampening 0, no nesterov) for S steps.
    Outputs p, buf (momentum buffer; zeros if momentum == 0)."""
    p = nn.Parameter(inp.f32("p0"))
    grads = inp.f32("grads")
    opt = torch.optim.SGD([p], lr=inp.float("lr"), momentum=inp.float("momentum"),
                          dampening=0.0, weight_decay=inp.float("weight_decay"),
                          nesterov=False)
    for s in range(_steps_of(grads, p)):
        p.grad = grads[s].clone()
        opt.step()
    buf = opt.state[p].get("momentum_buffer") if p in opt.state else None
    if buf is None:
        buf = torch.zeros_like(p)
    return {"p": out32(p), "buf": out32(buf)}


def case_grad_norm(inp):
    """Inputs g0, g1, g2 (any shapes); meta max_norm. Outputs norm [1] (total L2 norm
    before clipping) and g0, g1, g2 after torch.nn.utils.clip_grad_norm_."""
    names = ["g0", "g1", "g2"]
    params = []
    for n in names:
        g = inp.f32(n)
        p = nn.Parameter(torch.zeros_like(g))
        p.grad = g
        params.append(p)
    norm = torch.nn.utils.clip_grad_norm_(params, inp.float("max_norm"))
    out = {"norm": scalar1(norm)}
    for n, p in zip(names, params):
        out[n] = out32(p.grad)
    return out


# --------------------------------------------------------------------------- models


class SelfAttention(nn.Module):
    def __init__(self, C, n_head, causal):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.n_head = n_head
        self.causal = causal

    def forward(self, x, key_mask=None, docs=None):
        return self.proj(attention(self.qkv(x), self.n_head, self.causal, key_mask, doc_positions=docs))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(gelu(self.fc(x)))


class Block(nn.Module):
    """Transformer block; pre-LN (GPT, ViT) or post-LN (BERT)."""

    def __init__(self, C, n_head, eps, causal, pre_ln):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = SelfAttention(C, n_head, causal)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.mlp = MLP(C)
        self.pre_ln = pre_ln

    def forward(self, x, key_mask=None, docs=None):
        if self.pre_ln:
            x = x + self.attn(self.ln_1(x), key_mask, docs)
            x = x + self.mlp(self.ln_2(x))
        else:
            x = self.ln_1(x + self.attn(x, key_mask, docs))
            x = self.ln_2(x + self.mlp(x))
        return x


def positions_of(batch, T):
    """Each token's position: in its document where the batch packs documents (doc_positions
    [B, T]), else 0 .. T-1."""
    return batch["doc_positions"] if "doc_positions" in batch else torch.arange(T)


class GPT(nn.Module):
    """GPT-2: tied LM head (or, untied, lm_head [V, C] of its own), causal attention, pre-LN
    blocks, final ln_f."""

    def __init__(self, V, Tmax, C, n_layer, n_head, eps, untied=False):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(Tmax, C)
        self.blocks = nn.ModuleList(Block(C, n_head, eps, True, True) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.lm_head = nn.Linear(C, V, bias=False) if untied else None

    def forward(self, batch):
        tokens = batch["tokens"]
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(positions_of(batch, T))
        for blk in self.blocks:
            x = blk(x, docs=batch.get("doc_positions"))
        x = self.ln_f(x)
        logits = x @ (self.lm_head.weight if self.lm_head is not None else self.wte.weight).t()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               batch["targets"].reshape(-1), ignore_index=-100)
        return logits, loss


class BertMLMHead(nn.Module):
    def __init__(self, C, V, eps):
        super().__init__()
        self.dense = nn.Linear(C, C)
        self.ln = nn.LayerNorm(C, eps=eps)
        self.bias = nn.Parameter(torch.zeros(V))


class BertEmbeddings(nn.Module):
    def __init__(self, V, Tmax, C, eps):
        super().__init__()
        self.word = nn.Embedding(V, C)
        self.position = nn.Embedding(Tmax, C)
        self.token_type = nn.Embedding(2, C)
        self.ln = nn.LayerNorm(C, eps=eps)


class BERT(nn.Module):
    """Original BERT (MLM only): post-LN blocks, key padding mask, tied MLM decoder."""

    def __init__(self, V, Tmax, C, n_layer, n_head, eps):
        super().__init__()
        self.embeddings = BertEmbeddings(V, Tmax, C, eps)
        self.blocks = nn.ModuleList(Block(C, n_head, eps, False, False) for _ in range(n_layer))
        self.mlm = BertMLMHead(C, V, eps)

    def forward(self, batch):
        tokens = batch["tokens"]
        T = tokens.shape[1]
        e = self.embeddings
        x = e.word(tokens) + e.position(positions_of(batch, T)) + e.token_type(batch["token_types"])
        x = e.ln(x)
        for blk in self.blocks:
            x = blk(x, batch["attn_mask"], batch.get("doc_positions"))
        h = self.mlm.ln(gelu(self.mlm.dense(x)))
        logits = h @ e.word.weight.t() + self.mlm.bias
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               batch["targets"].reshape(-1), ignore_index=-100)
        return logits, loss


class ViT(nn.Module):
    """ViT-B style: conv patch embedding (weight stored [D, Ch*P*P]), cls token,
    learned position embedding, pre-LN blocks, ln_f, linear head on the cls token."""

    def __init__(self, C, n_layer, n_head, eps, image_size, patch_size, channels, num_classes):
        super().__init__()
        if image_size % patch_size != 0:
            raise OracleInputError(f"image_size {image_size} not divisible by patch_size {patch_size}")
        self.P = patch_size
        self.channels = channels
        n_patches = (image_size // patch_size) ** 2
        self.patch = nn.Linear(channels * patch_size * patch_size, C)
        self.cls_token = nn.Parameter(torch.zeros(C))
        self.pos_embed = nn.Parameter(torch.zeros(1 + n_patches, C))
        self.blocks = nn.ModuleList(Block(C, n_head, eps, False, True) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.head = nn.Linear(C, num_classes)

    def forward(self, batch):
        images = batch["images"]
        B = images.shape[0]
        D, P = self.patch.weight.shape[0], self.P
        w = self.patch.weight.view(D, self.channels, P, P)
        x = F.conv2d(images, w, self.patch.bias, stride=P)  # [B, D, H/P, W/P]
        x = x.flatten(2).transpose(1, 2)  # [B, N, D]
        cls = self.cls_token.view(1, 1, D).expand(B, 1, D)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        logits = self.head(x[:, 0])
        loss = F.cross_entropy(logits, batch["labels"])
        return logits, loss


def _state_dict_from(inp, model):
    """Parameter tensors (fp32) from the input file, by the model's parameter names."""
    sd = {}
    for name, _ in model.named_parameters():
        sd[name] = inp.f32(name)
    return sd


def _run_model(inp, build, batch_names):
    """Common driver for the model cases.

    build(inp) -> fresh nn.Module with the right shapes. Loads the parameters from the
    input file (strict), computes logits, loss and grads on the loaded weights, then,
    from the loaded weights again, runs `steps` AdamW steps recording each step's loss.
    """
    model = build(inp)
    sd = _state_dict_from(inp, model)
    model.load_state_dict(sd, strict=True)
    batch = {}
    for n in batch_names + (["doc_positions"] if inp.has("doc_positions") else []):
        t = inp.raw(n)
        batch[n] = t.to(torch.float32) if t.is_floating_point() else t.long()

    # 1) logits, loss and gradients at the loaded weights.
    model.zero_grad(set_to_none=True)
    logits, loss = model(batch)
    loss.backward()
    out = {"logits": out32(logits), "loss": scalar1(loss)}
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = out32(g)

    # 2) training run, restarting from the loaded weights.
    steps = inp.int("steps")
    model = build(inp)
    model.load_state_dict(sd, strict=True)
    opt = torch.optim.AdamW(model.parameters(), lr=inp.float("lr"),
                            betas=(inp.float("beta1"), inp.float("beta2")),
                            eps=inp.float("adam_eps"), weight_decay=inp.float("weight_decay"))
    step_losses = torch.zeros(steps, dtype=torch.float32)
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        _, loss_s = model(batch)
        loss_s.backward()
        opt.step()
        step_losses[s] = loss_s.detach()
    out["step_losses"] = step_losses
    return out


def _common_dims(inp, C_from):
    C = inp.int("n_embd")
    if C != C_from:
        raise OracleInputError(f"meta n_embd={C} but parameters have width {C_from}")
    return C, inp.int("n_layer"), inp.int("n_head"), inp.float("eps")


def case_gpt(inp):
    """GPT-2. Params wte.weight [V, C], wpe.weight [Tmax, C], blocks.{i}.*, ln_f.*, and with an
    untied head lm_head.weight [V, C];
    inputs tokens, targets [B, T] int32 (-100 ignore), optional doc_positions [B, T] int32 (packed
    documents: attention inside each, positions restarting). Outputs logits [B, T, V], loss [1],
    grad.<param>, step_losses [steps]."""
    def build(inp):
        V, C0 = inp.raw("wte.weight").shape
        Tmax = inp.raw("wpe.weight").shape[0]
        C, L, H, eps = _common_dims(inp, C0)
        return GPT(V, Tmax, C, L, H, eps, untied=inp.has("lm_head.weight"))
    return _run_model(inp, build, ["tokens", "targets"])


def case_bert(inp):
    """BERT MLM. Params embeddings.{word,position,token_type,ln}.*, blocks.{i}.* (post-LN),
    mlm.dense.*, mlm.ln.*, mlm.bias [V]; inputs tokens, token_types, attn_mask (1 keep,
    0 pad; masks keys only), targets [B, T] int32 (-100 ignore). Outputs logits [B, T, V],
    loss [1], grad.<param>, step_losses [steps]."""
    def build(inp):
        V, C0 = inp.raw("embeddings.word.weight").shape
        Tmax = inp.raw("embeddings.position.weight").shape[0]
        C, L, H, eps = _common_dims(inp, C0)
        return BERT(V, Tmax, C, L, H, eps)
    return _run_model(inp, build, ["tokens", "token_types", "attn_mask", "targets"])


def case_vit(inp):
    """ViT. Params patch.weight [D, Ch*P*P], patch.bias, cls_token [D], pos_embed [1+N, D],
    blocks.{i}.* (pre-LN), ln_f.*, head.weight [classes, D], head.bias; meta also
    image_size, patch_size, channels, num_classes; inputs images [B, Ch, H, W] f32,
    labels [B] int32. Outputs logits [B, classes], loss [1], grad.<param>, step_losses."""
    def build(inp):
        C0 = inp.raw("patch.weight").shape[0]
        C, L, H, eps = _common_dims(inp, C0)
        return ViT(C, L, H, eps, inp.int("image_size"), inp.int("patch_size"),
                   inp.int("channels"), inp.int("num_classes"))
    return _run_model(inp, build, ["images", "labels"])


# --------------------------------------------------------------------------- Llama op cases


def case_rms_norm(inp):
    """Inputs x [N, C], w [C], dy [N, C]; meta eps. Outputs y, dx, dw, rstd [N]. Hugging Face's
    LlamaRMSNorm (transformers 4.40): variance = mean(x^2); w * (x * rsqrt(variance + eps))."""
    eps = inp.float("eps")
    x = inp.f32("x", grad=True)
    w = inp.f32("w", grad=True)
    variance = x.pow(2).mean(-1, keepdim=True)
    y = w * (x * torch.rsqrt(variance + eps))
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dx": out32(x.grad), "dw": out32(w.grad),
            "rstd": out32(torch.rsqrt(variance + eps).reshape(-1))}


def llama3_inverse_frequencies(inv_freq, factor, low_freq_factor, high_freq_factor, old_context_len):
    """Llama 3's rope scaling, a re-statement of transformers' _compute_llama3_parameters
    (src/transformers/modeling_rope_utils.py, 4.43+; the pinned 4.40 predates it), in fp32 as
    there."""
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotate_half(x):
    """transformers' Llama: (x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def case_rotary(inp):
    """Inputs qkv [B, T, (H + 2 KV) hd], dy (same shape); meta n_head, n_kv_head, theta, first
    (the position of t = 0), and for Llama 3 scaling factor, low_freq_factor, high_freq_factor,
    original_max_positions (factor 0 or absent: none). Outputs y (q and k rotated, v as given),
    dqkv, inv_freq [hd/2], cos and sin [T, hd/2]. LlamaRotaryEmbedding and apply_rotary_pos_emb
    of transformers 4.40 (inv_freq, angles and cos/sin in fp32)."""
    qkv = inp.f32("qkv", grad=True)
    H, KV = inp.int("n_head"), inp.int("n_kv_head")
    theta, first = inp.float("theta"), inp.int("first")
    B, T, W = qkv.shape
    if W % (H + 2 * KV) != 0 or (W // (H + 2 * KV)) % 2 != 0:
        raise OracleInputError(f"qkv width {W} is not {H + 2 * KV} heads of an even head dim")
    hd = W // (H + 2 * KV)
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    factor = inp.float("factor", 0.0)
    if factor > 0:
        inv_freq = llama3_inverse_frequencies(inv_freq, factor, inp.float("low_freq_factor"),
                                              inp.float("high_freq_factor"), inp.int("original_max_positions"))
    position_ids = torch.arange(first, first + T, dtype=torch.int64)[None, :]
    freqs = (inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)  # [1, T, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [1, 1, T, hd]
    q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
    q = q.reshape(B, T, H, hd).transpose(1, 2)
    k = k.reshape(B, T, KV, hd).transpose(1, 2)
    q_embed = q * cos + rotate_half(q) * sin
    k_embed = k * cos + rotate_half(k) * sin
    y = torch.cat((q_embed.transpose(1, 2).reshape(B, T, H * hd), k_embed.transpose(1, 2).reshape(B, T, KV * hd), v),
                  dim=-1)
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dqkv": out32(qkv.grad), "inv_freq": out32(inv_freq),
            "cos": out32(freqs[0].cos()), "sin": out32(freqs[0].sin())}


def case_swiglu(inp):
    """Inputs gate_up [N, 2I], dy [N, I]. Outputs y = silu(gate) * up (Llama's MLP), dgate_up."""
    gate_up = inp.f32("gate_up", grad=True)
    gate, up = gate_up.chunk(2, dim=-1)
    y = F.silu(gate) * up
    y.backward(inp.f32("dy"))
    return {"y": out32(y), "dgate_up": out32(gate_up.grad)}


CASES = {
    "gemm": case_gemm,
    "bias": case_bias,
    "layernorm": case_layernorm,
    "gelu": case_gelu,
    "softmax": case_softmax,
    "attention": case_attention,
    "embedding": case_embedding,
    "cross_entropy": case_cross_entropy,
    "cast": case_cast,
    "nf4": case_nf4,
    "adamw": case_adamw,
    "sgd": case_sgd,
    "grad_norm": case_grad_norm,
    "gpt": case_gpt,
    "bert": case_bert,
    "vit": case_vit,
    "rms_norm": case_rms_norm,
    "rotary": case_rotary,
    "swiglu": case_swiglu,
}


def main(argv):
    if len(argv) != 4:
        print(f"usage: {argv[0]} CASE IN.safetensors OUT.safetensors\ncases: {' '.join(CASES)}",
              file=sys.stderr)
        return 2
    case, in_path, out_path = argv[1:]
    if case not in CASES:
        print(f"reference.py: unknown case {case!r}; known: {' '.join(CASES)}", file=sys.stderr)
        return 2
    if not os.path.isfile(in_path):
        print(f"reference.py: input file not found: {in_path}", file=sys.stderr)
        return 2

    torch.set_num_threads(int(os.environ.get("TIDAL_ORACLE_THREADS", "2")))
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)

    try:
        tensors, meta = safetensors_np.load(in_path)
        outputs = CASES[case](Inputs(tensors, meta))
    except OracleInputError as e:
        print(f"reference.py [{case}]: {e}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as e:
        # Shape mismatches from load_state_dict / matmul etc. are input problems too.
        print(f"reference.py [{case}]: invalid input: {e}", file=sys.stderr)
        return 2
    safetensors_np.save(out_path, outputs, {"case": case})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
