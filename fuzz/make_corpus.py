#!/usr/bin/env python3
"""Writes the seed corpus of each harness (fuzz/corpus/<harness>/): small valid inputs that the
fuzzer mutates. Run once when a format changes; the files are checked in."""
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def put(harness, name, data):
    d = os.path.join(here, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# fuzz_config: the shipped configs and a few overrides' shapes.
for name in ("llama-tiny.toml", "gpt2-small.toml", "finetune-gpt2.toml"):
    src = os.path.join(root, "configs", name)
    if os.path.exists(src):
        put("fuzz_config", name, open(src).read())
put("fuzz_config", "layout.toml", '[parallel]\ndata = 1\nschedule = "gpipe"\n[parallel.tensor]\nmode = "2d"\n'
    '[memory]\noffload = "chunk"\ndevice_limit = "2GiB"\n[train]\nprecision = "bf16"\nlr = 3e-4\n')


# fuzz_safetensors: two tensors and metadata.
def safetensors(tensors, metadata):
    header, blob = {"__metadata__": metadata}, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


put("fuzz_safetensors", "two.safetensors",
    safetensors({"a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), "b": ("BF16", [3], b"\x80\x3f" * 3)},
                {"format": "tidal"}))
put("fuzz_safetensors", "empty.safetensors", safetensors({}, {}))

# fuzz_token_file: llm.c shards, uint16 and uint32.
for version, fmt, width in ((1, "H", 2), (2, "I", 4)):
    tokens = [i % 64 for i in range(40)]
    header = struct.pack("<256i", *([20240520, version, len(tokens)] + [0] * 253))
    put("fuzz_token_file", f"v{version}.bin", header + struct.pack(f"<{len(tokens)}{fmt}", *tokens))

# fuzz_images: TIDALIMG, count, channels, height, width, classes, labels, pixels.
count, c, h, w, classes = 4, 1, 2, 2, 3
put("fuzz_images", "four.bin", b"TIDALIMG" + struct.pack("<5I", count, c, h, w, classes)
    + struct.pack(f"<{count}I", 0, 1, 2, 0) + bytes(range(count * c * h * w)))

# fuzz_hf_index: the index of the two shards the harness writes beside it ("a", "b" | "c").
put("fuzz_hf_index", "two_shards.json", json.dumps({
    "metadata": {"total_size": 52}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                   "b": "model-00001-of-00002.safetensors",
                                                   "c": "model-00002-of-00002.safetensors"}}, indent=2))

# fuzz_hf_config: GPT-2 and Llama 3 config.json.
put("fuzz_hf_config", "gpt2.json", json.dumps({
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8,
    "vocab_size": 50, "n_positions": 16, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
    "tie_word_embeddings": True}))
put("fuzz_hf_config", "llama.json", json.dumps({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16, "intermediate_size": 24,
    "vocab_size": 50, "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False}))


# fuzz_tokenizer: a byte-level BPE tokenizer.json (the 256 byte tokens, a few merges, an added token).
def byte_char(b):
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    if b in printable:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in printable].index(b))


vocab = {byte_char(b): b for b in range(256)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w")]
for l, r in merges:
    vocab.setdefault(l + r, len(vocab))
eot = len(vocab)
vocab["<|endoftext|>"] = eot
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
put("fuzz_tokenizer", "tiny.json", json.dumps({
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
              "merges": [f"{l} {r}" for l, r in merges]}}))


# fuzz_chat_data: conversations, one a line (a system prompt, several turns, a blank line).
put("fuzz_chat_data", "chats.jsonl", "\n".join(json.dumps(c) for c in [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4"}]},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello\nthere"},
                  {"role": "user", "content": "caf\u00e9?"}, {"role": "assistant", "content": " yes "}]},
    {"messages": [{"role": "user", "content": "no answer"}]}]) + "\n\n")


# fuzz_checkpoint: a step directory's metadata.json over the harness's rank file ("w.a", "w.b":
# two blocks of rows of "w" [4, 3], as io::save_safetensors writes them); checksums left out
# (the parser takes them as optional).
rank_header = json.dumps({"__metadata__": {"format": "tidal-checkpoint-2"},
                          "w.a": {"data_offsets": [0, 24], "dtype": "F32", "shape": [2, 3]},
                          "w.b": {"data_offsets": [24, 48], "dtype": "F32", "shape": [2, 3]}}, separators=(",", ":"))
rank_bytes = 8 + len(rank_header) + (8 - len(rank_header) % 8) % 8 + 48
put("fuzz_checkpoint", "two_blocks.json", json.dumps({
    "format": "tidal-checkpoint-2", "checksum_segment_bytes": 8388608, "step": 3, "consumed_samples": 24, "seed": 1,
    "optimizer": {"adamw_step": 3, "loss_scale": 0, "loss_scale_good_steps": 0},
    "layout": {"world_size": 2, "tensor": 2}, "config": "",
    "files": [{"file": "rank-00000.safetensors", "rank": 0, "bytes": rank_bytes}],
    "tensors": {"w": {"shape": [4, 3], "dtype": "F32", "blocks": [
        {"file": 0, "key": "w.a", "shape": [2, 3], "pieces": [{"row": 0, "start": [0, 0], "extent": [2, 3]}]},
        {"file": 0, "key": "w.b", "shape": [2, 3], "pieces": [{"row": 0, "start": [2, 0], "extent": [2, 3]}]}]}}}))

