#!/usr/bin/env python3
"""Hugging Face reference for tidal's init_from, export and sampling: transformers' own classes.

Runs in the venv of scripts/oracle-venv.sh (transformers 4.40.2 over Debian's torch).

Usage:
    hf_reference.py make FAMILY DIR [key=value ...]
        A randomly initialised GPT2LMHeadModel / BertForMaskedLM / ViTForImageClassification /
        LlamaForCausalLM / Qwen2ForCausalLM / MixtralForCausalLM / Qwen2MoeForCausalLM (family gpt2 |
        bert | vit | llama | qwen2 | mixtral | qwen2_moe) saved with save_pretrained. Every parameter gets noise on top
        of the HF init (so biases and LayerNorm are not zeros and ones). Keys: the config's sizes,
        seed, max_shard_size, peaked (gpt2: logits sharpened so greedy decoding has no near-ties).
    hf_reference.py run DIR IN.safetensors OUT.safetensors
        from_pretrained(DIR); the inputs of IN (gpt2, llama, qwen2: tokens, targets; bert: tokens,
        token_types, attn_mask, targets; vit: images, labels) -> logits, loss. mixtral and qwen2_moe:
        the loss adds router_aux_loss_coef times the mean over the layers of each layer's
        load-balancing loss (transformers' load_balancing_loss_func over that layer's router
        logits; with one layer, the model's own aux_loss). llama with
        doc_positions [B, T] (packed documents: each token's position in its document): the
        causal mask cut to each document (a 4D mask) and those positions as position_ids. With metadata lr (and
        beta1, beta2, adam_eps, weight_decay): `steps` (default 1) AdamW steps on the same batch,
        then logits_after, loss_after, and losses [steps] (each step's loss before its update).
        With metadata grads_dir: the first step's gradients saved there as model.safetensors under
        the parameters' names, beside a copy of config.json (a directory init_from can read).
    hf_reference.py lora-make DIR ADAPTERS [r=8 alpha=16 targets=q_proj,v_proj seed=1]
        PEFT's (0.11.1) LoRA adapters on the model of DIR, A and B both random (init_lora_weights=False,
        B then scaled by 0.1), saved with save_pretrained in ADAPTERS.
    hf_reference.py lora-run DIR ADAPTERS IN.safetensors OUT.safetensors
        PeftModel.from_pretrained(from_pretrained(DIR), ADAPTERS, is_trainable=True) on IN's tokens and
        targets -> logits, loss; with metadata lr (as run): `steps` AdamW steps over the adapters,
        losses, logits_after, loss_after, the first step's adapter gradients as "grad:" + the adapter
        file's tensor names, and "changed": 1 if any base weight changed, else 0.
    hf_reference.py lora-generate DIR ADAPTERS IN.safetensors OUT.safetensors
        generate as below, of PeftModel.from_pretrained(from_pretrained(DIR), ADAPTERS).
    hf_reference.py generate DIR IN.safetensors OUT.safetensors
        Greedy generate(do_sample=False) from the prompt `prompt` (int32 [1, n]) for metadata
        `tokens` new tokens -> ids.

Exit codes: 0 success, 2 bad usage.
"""

import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from safetensors import safe_open
import transformers
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2MoeConfig, Qwen2MoeForCausalLM, ViTConfig, ViTForImageClassification)
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

torch.set_num_threads(2)
CLASSES = {"gpt2": GPT2LMHeadModel, "bert": BertForMaskedLM, "vit": ViTForImageClassification,
           "llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "mixtral": MixtralForCausalLM,
           "qwen2_moe": Qwen2MoeForCausalLM}
MOE = ("mixtral", "qwen2_moe")


def parse_kv(items):
    out = {}
    for item in items:
        k, _, v = item.partition("=")
        out[k] = v
    return out


def config_value(text):
    """A command-line value as the config wants it: int, float, bool or string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def make(family, directory, kv):
    seed = int(kv.pop("seed", "1"))
    shard = kv.pop("max_shard_size", "5GB")
    peaked = kv.pop("peaked", "0") == "1"
    torch.manual_seed(seed)
    ints = {k: config_value(v) for k, v in kv.items()}
    if family == "gpt2":
        cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ints)
    elif family == "bert":
        cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **ints)
    elif family == "vit":
        num_labels = ints.pop("num_labels", 2)
        cfg = ViTConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=num_labels, **ints)
    elif family == "llama":
        cfg = LlamaConfig(attention_dropout=0.0, **ints)
    elif family == "qwen2":
        cfg = Qwen2Config(attention_dropout=0.0, **ints)
    elif family == "mixtral":
        cfg = MixtralConfig(attention_dropout=0.0, output_router_logits=True, **ints)
    elif family == "qwen2_moe":
        cfg = Qwen2MoeConfig(attention_dropout=0.0, output_router_logits=True, **ints)
    else:
        print(f"unknown family {family!r}", file=sys.stderr)
        sys.exit(2)
    model = CLASSES[family](cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
            if peaked and name.endswith(("wte.weight", "lm_head.weight")):
                p.mul_(8.0)  # the tied head: logits far apart, so greedy picks have no near-ties
    model.save_pretrained(directory, safe_serialization=True, max_shard_size=shard)


def load(directory):
    with open(f"{directory}/config.json") as f:
        import json
        family = json.load(f)["model_type"]
    model = CLASSES[family].from_pretrained(directory)
    return family, model


def document_mask(docs):
    """transformers' 4D mask [B, 1, T, T] (1 attended, 0 not) of packed documents under the causal
    mask: query i attends key j <= i of its own document (0 in doc_positions starts one)."""
    B, T = docs.shape
    doc = torch.cumsum((docs == 0).long(), dim=1)
    same = doc.view(B, T, 1) == doc.view(B, 1, T)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return (same & causal).view(B, 1, T, T).float()


def router_loss(model, out):
    """router_aux_loss_coef x the mean over the layers of each layer's load-balancing loss."""
    cfg = model.config
    experts = cfg.num_local_experts if hasattr(cfg, "num_local_experts") else cfg.num_experts
    layers = out.router_logits
    if len(layers) == 1:
        balance = out.aux_loss
    else:
        balance = sum(load_balancing_loss_func((g,), experts, cfg.num_experts_per_tok) for g in layers) / len(layers)
    return cfg.router_aux_loss_coef * balance


def forward(family, model, x):
    if family in MOE:
        out = model(input_ids=x["tokens"].long(), output_router_logits=True)
        logits = out.logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x["targets"].long().reshape(-1),
                               ignore_index=-100) + router_loss(model, out)
    elif family in ("llama", "qwen2") and "doc_positions" in x:
        docs = x["doc_positions"].long()
        logits = model(input_ids=x["tokens"].long(), attention_mask=document_mask(docs), position_ids=docs).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x["targets"].long().reshape(-1),
                               ignore_index=-100)
    elif family in ("gpt2", "llama", "qwen2"):
        logits = model(input_ids=x["tokens"].long()).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x["targets"].long().reshape(-1),
                               ignore_index=-100)
    elif family == "bert":
        out = model(input_ids=x["tokens"].long(), token_type_ids=x["token_types"].long(),
                    attention_mask=x["attn_mask"].long(), labels=x["targets"].long())
        logits, loss = out.logits, out.loss
    else:
        out = model(pixel_values=x["images"].float(), labels=x["labels"].long())
        logits, loss = out.logits, out.loss
    return logits, loss


def read_inputs(path):
    """The tensors of a safetensors file and its string metadata."""
    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
    return load_file(path), meta


def run(directory, path_in, path_out):
    family, model = load(directory)
    model.train()
    x, meta = read_inputs(path_in)
    logits, loss = forward(family, model, x)
    out = {"logits": logits.detach().float().contiguous(), "loss": loss.detach().float().reshape(1)}
    if "lr" in meta:
        opt = torch.optim.AdamW(model.parameters(), lr=float(meta["lr"]),
                                betas=(float(meta["beta1"]), float(meta["beta2"])),
                                eps=float(meta["adam_eps"]), weight_decay=float(meta["weight_decay"]))
        losses = []
        for step in range(int(meta.get("steps", "1"))):
            if step > 0:
                opt.zero_grad()
                logits, loss = forward(family, model, x)
            losses.append(loss.item())
            loss.backward()
            if step == 0 and "grads_dir" in meta:
                save_gradients(model, directory, meta["grads_dir"])
            opt.step()
        out["losses"] = torch.tensor(losses, dtype=torch.float32)
        logits2, loss2 = forward(family, model, x)
        out["logits_after"] = logits2.detach().float().contiguous()
        out["loss_after"] = loss2.detach().float().reshape(1)
    save_file(out, path_out)


def save_gradients(model, directory, grads_dir):
    import os
    import shutil
    os.makedirs(grads_dir, exist_ok=True)
    shutil.copy(f"{directory}/config.json", f"{grads_dir}/config.json")
    save_file({n: p.grad.detach().float().contiguous() for n, p in model.named_parameters()},
              f"{grads_dir}/model.safetensors")


def lora_make(directory, adapters, kv):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(int(kv.get("seed", "1")))
    _, model = load(directory)
    cfg = LoraConfig(r=int(kv.get("r", "8")), lora_alpha=float(kv.get("alpha", "16")), lora_dropout=0.0,
                     target_modules=kv.get("targets", "q_proj,v_proj").split(","), init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(0.1)
    peft_model.save_pretrained(adapters)


def lora_run(directory, adapters, path_in, path_out):
    from peft import PeftModel
    family, base = load(directory)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = PeftModel.from_pretrained(base, adapters, is_trainable=True)
    model.train()
    x, meta = read_inputs(path_in)
    trained = [(n.replace(".default", ""), p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([p for _, p in trained], lr=float(meta["lr"]),
                            betas=(float(meta["beta1"]), float(meta["beta2"])), eps=float(meta["adam_eps"]),
                            weight_decay=float(meta["weight_decay"]))
    out, losses = {}, []
    for step in range(int(meta.get("steps", "1"))):
        opt.zero_grad()
        logits, loss = forward(family, model, x)
        if step == 0:
            out["logits"] = logits.detach().float().contiguous()
            out["loss"] = loss.detach().float().reshape(1)
        losses.append(loss.item())
        loss.backward()
        if step == 0:
            out.update({"grad:" + n: p.grad.detach().float().clone() for n, p in trained})
        opt.step()
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    logits2, loss2 = forward(family, model, x)
    out["logits_after"] = logits2.detach().float().contiguous()
    out["loss_after"] = loss2.detach().float().reshape(1)
    changed = any(not torch.equal(p, before[n]) for n, p in base.named_parameters() if "lora_" not in n and n in before)
    out["changed"] = torch.tensor([1 if changed else 0], dtype=torch.int32)
    save_file(out, path_out)


def generate(directory, path_in, path_out, adapters=None):
    _, model = load(directory)
    if adapters is not None:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapters)
    model.eval()
    # Decoding needs no router losses (and transformers 4.40's Qwen2-MoE fails computing them
    # under a growing attention mask).
    model.config.output_router_logits = False
    x, meta = read_inputs(path_in)
    prompt = x["prompt"].long()
    ids = model.generate(prompt, do_sample=False, max_new_tokens=int(meta["tokens"]), min_new_tokens=int(meta["tokens"]),
                         pad_token_id=0, attention_mask=torch.ones_like(prompt))
    save_file({"ids": ids.to(torch.int32).contiguous()}, path_out)


def main(argv):
    if len(argv) >= 3 and argv[0] == "make":
        make(argv[1], argv[2], parse_kv(argv[3:]))
    elif len(argv) == 4 and argv[0] == "run":
        run(argv[1], argv[2], argv[3])
    elif len(argv) >= 3 and argv[0] == "lora-make":
        lora_make(argv[1], argv[2], parse_kv(argv[3:]))
    elif len(argv) == 5 and argv[0] == "lora-run":
        lora_run(argv[1], argv[2], argv[3], argv[4])
    elif len(argv) == 5 and argv[0] == "lora-generate":
        generate(argv[1], argv[3], argv[4], adapters=argv[2])
    elif len(argv) == 4 and argv[0] == "generate":
        generate(argv[1], argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    assert transformers.__version__ == "4.40.2", transformers.__version__
    sys.exit(main(sys.argv[1:]))
