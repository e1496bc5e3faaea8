"""One GPT-2 or Llama training run in tidal and in PyTorch, for the benchmarks that put them side
by side (bench/cpu_train_vs_torch.py, bench/gpu_train.py): the same shape, batch, precision, AdamW
and global-norm clipping on both sides.

- tidal: `tidal train` with the shape as --set keys; its speed comes from its own metrics file
  (one record per step with step_time_s), steady state only (the first steps are warm-up).
- PyTorch: the oracle's GPT-2 (tests/oracle/reference.py, the model tidal's golden tests check
  tidal against) with F.scaled_dot_product_attention (causal) where torch has it, else the
  oracle's own attention; a Llama is transformers' own LlamaForCausalLM (its SDPA attention);
  eager or torch.compile; bf16 / fp16 by autocast over fp32 weights
  (fp16 with a GradScaler), as tidal keeps fp32 master weights; fused AdamW where torch has it.

Model FLOPs per token, the issue's 6N + 6LCT: 6 per parameter that multiplies (forward 2,
backward 4) and the causal attention's QK^T and AV (half of a full attention's 12LCT). N is every
parameter but the position embedding (a lookup, no multiply), the tied embedding / LM head once.

Run as a program it is one PyTorch run that prints one JSON line: bench/gpu_train.py starts one
process per system so that each has the GPU (and its memory) to itself.
    python3 bench/gpt_training.py '{"shape": {...}, "mode": "eager", "device": "cuda", ...}'
"""
import contextlib
import dataclasses
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The optimizer of both sides (tidal: train.*; AdamW's eps is tidal's fixed 1e-8).
OPTIMIZER = dict(lr=3e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, grad_clip=1.0)
LAYERNORM_EPS = 1e-5  # tidal's


@dataclasses.dataclass(frozen=True)
class GptShape:
    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int
    seq_len: int

    def parameters(self):
        """All parameters, as tidal counts them: tied LM head once, position embedding included."""
        L, C, V, T = self.n_layer, self.n_embd, self.vocab_size, self.seq_len
        block = 12 * C * C + 13 * C  # qkv, attention proj, fc, mlp proj (weights + biases), 2 layernorms
        return V * C + T * C + L * block + 2 * C

    def flops_per_token(self):
        L, C, T = self.n_layer, self.n_embd, self.seq_len
        return 6 * (self.parameters() - T * C) + 6 * L * C * T

    def describe(self):
        return (f"GPT-2: {self.n_layer} layers, width {self.n_embd}, {self.n_head} heads, vocab {self.vocab_size}, "
                f"seq_len {self.seq_len}")


@dataclasses.dataclass(frozen=True)
class LlamaShape:
    """A Llama: RMSNorm, rotary positions, n_kv_head key / value heads, SwiGLU of width
    intermediate_size, an untied head; the fields are tidal's model.* keys."""
    n_layer: int
    n_embd: int
    n_head: int
    n_kv_head: int
    intermediate_size: int
    vocab_size: int
    seq_len: int
    model_type = "llama"

    @staticmethod
    def from_toml(path):
        """The [model] of a tidal config (configs/llama-tiny.toml) and its train.batch_size."""
        import tomllib
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
        m = cfg["model"]
        shape = LlamaShape(**{f.name: int(m[f.name]) for f in dataclasses.fields(LlamaShape)})
        return shape, int(cfg.get("train", {}).get("batch_size", 8))

    def parameters(self):
        """All parameters, as tidal counts them: the token table and the head each."""
        L, C, V, I = self.n_layer, self.n_embd, self.vocab_size, self.intermediate_size
        kv = self.n_kv_head * (C // self.n_head)
        block = C * (C + 2 * kv) + C * C + 3 * C * I + 2 * C  # qkv, o, gate / up / down, 2 RMSNorms
        return 2 * V * C + L * block + C

    def flops_per_token(self):
        """6N + 6LCT with N every parameter that multiplies (the token table is a lookup)."""
        L, C, T = self.n_layer, self.n_embd, self.seq_len
        return 6 * (self.parameters() - self.vocab_size * C) + 6 * L * C * T

    def describe(self):
        return (f"Llama: {self.n_layer} layers, width {self.n_embd}, {self.n_head} heads ({self.n_kv_head} kv), "
                f"SwiGLU {self.intermediate_size}, vocab {self.vocab_size}, seq_len {self.seq_len}")


@dataclasses.dataclass(frozen=True)
class MixtralShape(LlamaShape):
    """A Mixtral: the Llama shape with `experts` SwiGLU experts of width intermediate_size in each
    block's MLP place, experts_per_token a token, and the load-balancing loss (router_aux_loss_coef)
    in the loss on both sides; the fields are tidal's model.* keys."""
    experts: int = 8
    experts_per_token: int = 2
    router_aux_loss_coef: float = 0.001
    model_type = "mixtral"

    def parameters(self):
        L, C, V, I, E = self.n_layer, self.n_embd, self.vocab_size, self.intermediate_size, self.experts
        kv = self.n_kv_head * (C // self.n_head)
        block = C * (C + 2 * kv) + C * C + E * 3 * C * I + E * C + 2 * C  # qkv, o, experts, router, 2 RMSNorms
        return 2 * V * C + L * block + C

    def active_parameters(self):
        """What one token multiplies: its experts_per_token experts of each block, not the rest."""
        L, C, I, E, k = self.n_layer, self.n_embd, self.intermediate_size, self.experts, self.experts_per_token
        return self.parameters() - L * (E - k) * 3 * C * I

    def flops_per_token(self):
        """6N + 6LCT with N the active parameters that multiply (the token table is a lookup)."""
        L, C, T = self.n_layer, self.n_embd, self.seq_len
        return 6 * (self.active_parameters() - self.vocab_size * C) + 6 * L * C * T

    def dense(self):
        """The Llama of the same active parameters: one SwiGLU of width experts_per_token x I."""
        return LlamaShape(self.n_layer, self.n_embd, self.n_head, self.n_kv_head,
                          self.experts_per_token * self.intermediate_size, self.vocab_size, self.seq_len)

    def describe(self):
        return (f"Mixtral: {self.n_layer} layers, width {self.n_embd}, {self.n_head} heads ({self.n_kv_head} kv), "
                f"{self.experts} experts of SwiGLU {self.intermediate_size}, {self.experts_per_token} a token, vocab "
                f"{self.vocab_size}, seq_len {self.seq_len}")


def tidal_sets(shape, batch, steps, precision, device):
    """`tidal train --set` keys for a timing run: no evaluation but the final one on one batch."""
    sets = [f"model.{f.name}={getattr(shape, f.name)}" for f in dataclasses.fields(shape)]
    sets += [f"model.type={getattr(shape, 'model_type', 'gpt')}"]
    sets += [f"train.batch_size={batch}", f"train.steps={steps}", f"train.precision={precision}",
             f"train.device={device}", "train.eval_every=0", "train.eval_batches=1", "train.warmup_steps=1"]
    sets += [f"train.{k}={v}" for k, v in OPTIMIZER.items()]
    return sets


def run_tidal(tidal, sets, env=None, start=subprocess.run):
    """Runs `tidal train` with `sets`; returns its metrics records (JSON lines).

    `start(cmd, **kwargs)` runs the command (a measuring runner may replace subprocess.run)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [tidal, "train", "--metrics", metrics]
        for s in sets:
            cmd += ["--set", s]
        start(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        return [json.loads(line) for line in open(metrics)]


def tidal_speed(records, shape, batch, warmup):
    """(tokens/s, seconds per step, summary record) of a tidal run's steps after the first `warmup`;
    checks that tidal counts the shape's parameters (the FLOPs per token rest on the count)."""
    summary = [r for r in records if r.get("summary")][-1]
    if summary["parameters"] != shape.parameters():
        raise ValueError(f"tidal counts {summary['parameters']} parameters, GptShape {shape.parameters()}")
    steps = [r["step_time_s"] for r in records if "step_time_s" in r][warmup:]
    if not steps:
        raise ValueError(f"tidal ran no step after the {warmup} warm-up steps: give more steps")
    return batch * shape.seq_len * len(steps) / sum(steps), sum(steps) / len(steps), summary


# --------------------------------------------------------------------------- PyTorch's side


def torch_llama(shape):
    """transformers' LlamaForCausalLM of `shape` (its default attention: SDPA on torch 2), as a
    module model(tokens, targets) -> mean cross-entropy of the logits at every position."""
    import torch
    import torch.nn.functional as F
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=shape.n_embd, num_hidden_layers=shape.n_layer, num_attention_heads=shape.n_head,
                      num_key_value_heads=shape.n_kv_head, intermediate_size=shape.intermediate_size,
                      vocab_size=shape.vocab_size, max_position_embeddings=shape.seq_len, tie_word_embeddings=False)

    class Llama(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = LlamaForCausalLM(cfg)

        def forward(self, tokens, targets):
            logits = self.hf(input_ids=tokens).logits
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    model = Llama()
    return model, f"{model.hf.config._attn_implementation} (transformers {__import__('transformers').__version__})"


def torch_mixtral(shape):
    """transformers' MixtralForCausalLM of `shape`, its loss the cross-entropy plus
    router_aux_loss_coef times its load-balancing loss (output_router_logits), as tidal's."""
    import torch
    import torch.nn.functional as F
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(hidden_size=shape.n_embd, num_hidden_layers=shape.n_layer, num_attention_heads=shape.n_head,
                        num_key_value_heads=shape.n_kv_head, intermediate_size=shape.intermediate_size,
                        vocab_size=shape.vocab_size, max_position_embeddings=shape.seq_len,
                        num_local_experts=shape.experts, num_experts_per_tok=shape.experts_per_token,
                        router_aux_loss_coef=shape.router_aux_loss_coef, output_router_logits=True)

    class Mixtral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = MixtralForCausalLM(cfg)

        def forward(self, tokens, targets):
            out = self.hf(input_ids=tokens)
            logits = out.logits
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
            return ce + shape.router_aux_loss_coef * out.aux_loss

    model = Mixtral()
    return model, f"{model.hf.config._attn_implementation} (transformers {__import__('transformers').__version__})"


def torch_gpt(shape):
    """The oracle's GPT-2 for `shape`, attention through SDPA where torch has it.

    Returns (model, attention name); model(tokens, targets) -> mean cross-entropy loss."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
    import reference

    sdpa = hasattr(F, "scaled_dot_product_attention")

    class SdpaSelfAttention(reference.SelfAttention):
        """The oracle's attention and parameters; the causal softmax(QK^T)V by PyTorch's fused kernel."""

        def forward(self, x, key_mask=None, docs=None):  # the oracle's Block passes both (None here)
            assert key_mask is None and docs is None, "the benchmark's GPT has no key mask or documents"
            B, T, C = x.shape
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, H, T, hs]
                       for t in self.qkv(x).split(C, dim=-1))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, hs]
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    class Gpt(reference.GPT):
        # The oracle runs on the CPU only and makes its positions there; these follow the tokens.
        def forward(self, tokens, targets):
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # [B, T, V]
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    model = Gpt(shape.vocab_size, shape.seq_len, shape.n_embd, shape.n_layer, shape.n_head, LAYERNORM_EPS)
    if sdpa:
        for blk in model.blocks:
            blk.attn = SdpaSelfAttention(shape.n_embd, shape.n_head, True)
    # GPT-2's initialisation (PyTorch's default N(0, 1) embeddings, tied to the head, start at a loss of ~80).
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.zeros_(m.bias)
    return model, "SDPA (causal)" if sdpa else "manual (oracle's; this torch has no SDPA)"


def torch_train(shape, batch, steps, warmup, precision, device, mode, threads=None, micro_batches=1):
    """Trains `steps` steps (forward, backward, clipping, AdamW) on one random batch of the shape's
    vocabulary and returns a record: tokens/s over the steps after `warmup` (run back to back,
    synchronised once at the end: PyTorch's best case), or `skipped` with the reason. With
    `micro_batches`, each step's batch goes through forward and backward in that many equal parts
    whose gradients accumulate (each part's loss weighted 1 / micro_batches)."""
    import torch
    record = {"system": "PyTorch " + ("eager" if mode == "eager" else "torch.compile"), "torch": torch.__version__}
    if mode == "compile" and not hasattr(torch, "compile"):
        return dict(record, skipped=f"torch {torch.__version__} has no torch.compile")
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    cuda = device == "cuda"
    if cuda:
        record["device_name"] = torch.cuda.get_device_name()
        # fp32 GEMMs in TF32, as tidal's cuBLASLt does (and as the fp32 MFU's peak assumes); the
        # global setting, which torch.compile reads too.
        torch.set_float32_matmul_precision("high")
    # On the device from the start where torch can (a 1.5B model built on the CPU takes long).
    on_device = torch.device(device) if hasattr(torch.device, "__enter__") else contextlib.nullcontext()
    with on_device:
        build = {LlamaShape: torch_llama, MixtralShape: torch_mixtral}.get(type(shape), torch_gpt)
        model, record["attention"] = build(shape)
    model.to(device)
    o = OPTIMIZER

    def adamw(**fused):
        return torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=1e-8,
                                 weight_decay=o["weight_decay"], **fused)

    # Fused AdamW where this torch has it for the device (CUDA; the CPU from torch 2.4), else the
    # default (foreach) one.
    opt, record["optimizer"] = None, "AdamW"
    if "fused" in inspect.signature(torch.optim.AdamW).parameters:
        try:
            opt, record["optimizer"] = adamw(fused=True), "AdamW (fused)"
        except (RuntimeError, TypeError):
            pass
    opt = opt or adamw()
    forward = torch.compile(model) if mode == "compile" else model
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    tokens = torch.randint(shape.vocab_size, (batch, shape.seq_len), device=device)
    targets = torch.randint(shape.vocab_size, (batch, shape.seq_len), device=device)

    # fp32: no autocast at all (torch 1.13 warns about a CPU autocast of fp32 even when disabled).
    def autocast():
        return torch.autocast(device_type=device, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()

    def step():
        opt.zero_grad(set_to_none=True)
        for part_tokens, part_targets in zip(tokens.chunk(micro_batches), targets.chunk(micro_batches)):
            with autocast():
                loss = forward(part_tokens, part_targets) / micro_batches
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
            scaler.step(opt)
            scaler.update()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
            opt.step()
        return loss * micro_batches

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps - warmup):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0
    record.update(tokens_per_s=batch * shape.seq_len * (steps - warmup) / seconds,
                  step_s=seconds / (steps - warmup), final_loss=float(loss))
    if cuda:
        record["torch_allocated_peak_bytes"] = torch.cuda.max_memory_allocated()
    return record


def print_job(train, job):
    """One run of a side-by-side benchmark in its own process: train(**job)'s record as one JSON line,
    or what failed (the benchmark reports it and goes on with the other systems)."""
    try:
        record = train(**job)
    except Exception as e:
        traceback.print_exc()
        record = {"failed": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"}
    print(json.dumps(record))


def main():
    job = json.loads(sys.argv[1])
    kind = MixtralShape if "experts" in job["shape"] else LlamaShape if "n_kv_head" in job["shape"] else GptShape
    job["shape"] = kind(**job["shape"])
    print_job(torch_train, job)


if __name__ == "__main__":
    main()
