"""Chat data (data.kind = "chat") against transformers (4.40.2): the loss mask and the loss.

For ChatML (on a GPT-2) and Llama 3 (on a Llama), a byte-level BPE with the template's special tokens is
trained with `tokenizers` and saved as a Hugging Face tokenizer directory whose tokenizer_config.json
holds the model's chat template; random conversations (system prompts or not, several turns, white
space around the contents, non-ASCII text, one without an answer, one longer than a sequence) go
in a JSON-lines file. transformers renders each with apply_chat_template and labels it as
fine-tuning scripts do: the tokens after apply_chat_template(messages[:i], add_generation_prompt=True)
up to the end of apply_chat_template(messages[:i + 1]) are assistant message i's, the rest -100.

tidal reads the same file (`tidal data --json`, the template taken from tokenizer_config.json or
named by data.chat_template): its sequences hold the conversations whole as transformers' ids (cut
to a sequence where longer), packed first fit over the 64 newest sequences, each sequence's rest
padding; every token's
target is kept exactly where transformers' label is not -100. `tidal train` on those sequences
(model.init_from the random model, one step, every sequence in the batch) reports as its loss the
mean of the Hugging Face model's per-token losses on those labels, each conversation alone,
within fp32 tolerance; LoRA over 2 data-parallel ranks (given mpirun) gives one process's losses.
Then the errors (exit 2): a template tidal does not render, a line that is
not a conversation, a role it does not know, a tokenizer without the template's tokens.

usage: check_chat.py path/to/tidal [mpirun command ...]   (with the oracle venv's python: scripts/oracle-venv.sh)
"""

import json
import os
import random
import subprocess
import sys
import tempfile

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference  # noqa: E402

torch.set_num_threads(2)
SEQ_LEN = 96
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
          "<|end_header_id|>\\n\\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]
WORDS = ("the model trains on answers only while prompts stay context a tokenizer splits text into pieces "
         "what is seven times six forty-two café naïve 東京 größer Ωmega 42 3.14 (x, y) = f(z); def run():").split()
failures = 0


def fail(message):
    global failures
    failures += 1
    print(f"FAIL {message}")


def content(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 9))]
    text = " ".join(words)
    if rng.random() < 0.2:
        text = text.replace(" ", "\n", 1)
    if rng.random() < 0.2:
        text = " " + text  # white space around: Llama 3's template trims it
    if rng.random() < 0.2:
        text += rng.choice([" ", "\n", "  "])
    return text


def conversations(rng, count):
    out = []
    for i in range(count):
        messages = [{"role": "system", "content": content(rng)}] if rng.random() < 0.4 else []
        for _ in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": content(rng)})
            messages.append({"role": "assistant", "content": content(rng)})
        out.append({"messages": messages})
    out[3] = {"messages": [{"role": "user", "content": "no answer here"}]}  # trains nothing: left out
    out[7]["messages"].append({"role": "user", "content": " ".join(WORDS * 3)})  # longer than a sequence
    out[7]["messages"].append({"role": "assistant", "content": " ".join(WORDS)})
    return out


def make_tokenizer(directory, template, rows):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([m["content"] for r in rows for m in r["messages"]] * 3, trainer)
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    bos = "<|begin_of_text|>" if template == LLAMA3 else "<|endoftext|>"
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, "bos_token": bos,
                   "eos_token": "<|endoftext|>", "model_max_length": 4096}, f)
    return AutoTokenizer.from_pretrained(directory), tok.get_vocab_size()


def labelled(tokenizer, messages):
    """apply_chat_template's ids, and labels: assistant message i's tokens kept, the rest -100."""
    ids = tokenizer.apply_chat_template(messages, tokenize=True)
    labels = [-100] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(messages[:i], tokenize=True, add_generation_prompt=True)
        upto = tokenizer.apply_chat_template(messages[:i + 1], tokenize=True)
        assert ids[:len(upto)] == upto and upto[:len(prompt)] == prompt, "the renderings are not prefixes"
        labels[len(prompt):len(upto)] = upto[len(prompt):]
    return ids, labels


def tidal_run(cmd, expect=0):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout[-3000:], r.stderr[-3000:])
        fail(f"{' '.join(cmd[:2])} exited {r.returncode}, not {expect}")
    return r


def documents(record):
    """A `tidal data --json` sample's documents: (tokens, kept) where kept[j]: token j is a target."""
    tokens, targets, positions = record["tokens"], record["targets"], record["positions"]
    kept = [False] + [t != -100 for t in targets]
    # The last token is beyond the inputs: its target tells it when kept (else None: unknown).
    tokens = tokens + [targets[-1] if targets[-1] != -100 else None]
    starts = [j for j, p in enumerate(positions) if p == 0] + [len(positions) + 1]
    return [(tokens[a:b], kept[a:b]) for a, b in zip(starts, starts[1:])]


def check(tidal, mpirun, root, name, template, family, make_args, from_tokenizer):
    rows = conversations(random.Random(name), 30)
    tok_dir = os.path.join(root, name + "-tokenizer")
    tokenizer, vocab = make_tokenizer(tok_dir, template, rows)
    data = os.path.join(root, name + ".jsonl")
    with open(data, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.write("\n")  # a blank line is no conversation
    hf = os.path.join(root, name + "-model")
    hf_reference.make(family, hf, dict(make_args, vocab_size=str(vocab), seed="3"))

    # transformers' conversations, cut to a sequence, those with nothing to train left out, packed.
    length = SEQ_LEN + 1
    expected = []
    for r in rows:
        ids, labels = labelled(tokenizer, r["messages"])
        ids, labels = ids[:length], labels[:length]
        if any(label != -100 for label in labels):
            expected.append((ids, labels))
    packs, opened = [], []  # first fit over the 64 newest sequences with room, as tidal packs
    for ids, labels in expected:
        room = next((o for o in opened if o[1] + len(ids) <= length), None)
        if room is None:
            if len(opened) == 64:
                opened.pop(0)
            packs.append([])
            room = [len(packs) - 1, 0]
            opened.append(room)
        room[1] += len(ids)
        packs[room[0]].append((ids, labels))
        if room[1] == length:
            opened.remove(room)

    chat = ["--set", "data.kind=chat", "--set", f"data.path={data}", "--set", f"data.eval_path={data}",
            "--set", f"data.tokenizer={tok_dir}/tokenizer.json", "--set", f"model.init_from={hf}",
            "--set", f"model.seq_len={SEQ_LEN}"]
    if not from_tokenizer:
        chat += ["--set", "data.chat_template=" + ("chatml" if template == CHATML else "llama3")]
    r = tidal_run([tidal, "data", *chat, "--split", "eval", "-n", str(len(packs)), "--json"])
    if r.returncode != 0:
        return
    samples = [json.loads(line) for line in r.stdout.splitlines()]
    masks, before = 0, failures
    for s, (record, pack) in enumerate(zip(samples, packs)):
        docs = documents(record)
        for k, (ids, labels) in enumerate(pack):
            tokens, kept = docs[k]
            want = [label != -100 for label in labels]
            if k == len(docs) - 1 and len(tokens) == len(ids) + 1 and not kept[-1]:
                tokens, kept = tokens[:-1], kept[:-1]  # one token of padding, the last: no position shows it
            if tokens[-1] is None:  # unknown: the sequence's last token, not a target
                tokens = tokens[:-1] + ids[len(tokens) - 1:len(tokens)]
            if tokens != ids:
                fail(f"{name}: sequence {s} document {k}: tidal's tokens {tokens} != transformers' {ids}")
            elif kept != want:
                fail(f"{name}: sequence {s} document {k}: tidal's targets {kept} != transformers' labels {want}")
            masks += 1
        for tokens, kept in docs[len(pack):]:  # the rest is padding: one document, nothing trained
            if any(kept) or len(set(t for t in tokens if t is not None)) != 1:
                fail(f"{name}: sequence {s}: more than padding after its {len(pack)} conversations")
    if failures > before:
        pass
    elif len(samples) != len(packs) or masks != len(expected):
        fail(f"{name}: tidal shows {len(samples)} sequences, transformers' packing {len(packs)}")
    else:
        print(f"ok   {name}: {len(expected)} conversations in {len(packs)} sequences of {length}: tidal's tokens "
              f"and trained targets equal transformers' ids and labels (-100 elsewhere)")

    # The loss: the HF model's on those labels, each conversation alone, against tidal's first step.
    model = AutoModelForCausalLM.from_pretrained(hf).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in expected:
            out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
            n = sum(1 for label in labels[1:] if label != -100)
            total += out.loss.item() * n
            count += n
    want = total / count
    metrics = os.path.join(root, name + "-metrics.jsonl")
    r = tidal_run([tidal, "train", *chat, "--set", "train.steps=1", "--set", f"train.batch_size={len(packs)}",
                   "--set", "train.eval_batches=1", "--metrics", metrics])
    if r.returncode != 0:
        return
    got = next(rec["loss"] for rec in map(json.loads, open(metrics)) if rec.get("step") == 1 and "loss" in rec)
    if abs(got - want) > 1e-4 + 1e-4 * abs(want):
        fail(f"{name}: tidal's loss {got} != the Hugging Face model's {want} on the {count} trained targets")
    else:
        print(f"ok   {name}: tidal's loss {got:.6f} = {family}'s {want:.6f} over {count} answer tokens "
              f"(|diff| {abs(got - want):.1e})")

    if mpirun:  # LoRA on the chat data over 2 data-parallel ranks: the losses of one process
        lora = [*chat, "--set", "finetune.method=lora", "--set", "train.steps=3", "--set", "train.batch_size=8",
                "--set", "train.lr=1e-2", "--set", "train.warmup_steps=0", "--set", "train.eval_every=0"]
        runs = {}
        for ranks in (1, 2):
            out = os.path.join(root, f"{name}-lora{ranks}.jsonl")
            launch = [*mpirun, "-np", "2"] if ranks > 1 else []
            r = tidal_run([*launch, tidal, "train", *lora, "--set", f"parallel.data={ranks}", "--metrics", out])
            if r.returncode != 0:
                return
            runs[ranks] = [rec["loss"] for rec in map(json.loads, open(out)) if "loss" in rec and "step" in rec
                           and not rec.get("summary")]
        if len(runs[1]) != 3 or any(abs(a - b) > 1e-5 * abs(a) for a, b in zip(runs[1], runs[2])):
            fail(f"{name}: LoRA over 2 data-parallel ranks {runs[2]} != one process {runs[1]}")
        else:
            print(f"ok   {name}: LoRA, 3 steps over 2 data-parallel ranks: losses {runs[2]} = one process's")

    r = tidal_run([tidal, "data", *chat, "-n", "1"])
    if r.returncode == 0 and "[[" not in r.stdout:
        fail(f"{name}: tidal data marks no trained tokens:\n{r.stdout}")
    return tok_dir, data, hf


def check_errors(tidal, root, tok_dir, data, hf):
    base = ["--set", "data.kind=chat", "--set", f"data.tokenizer={tok_dir}/tokenizer.json", "--set",
            f"model.init_from={hf}", "--set", f"model.seq_len={SEQ_LEN}"]
    bad = os.path.join(root, "bad.jsonl")
    other = os.path.join(root, "other-tokenizer")
    os.makedirs(other, exist_ok=True)
    with open(os.path.join(tok_dir, "tokenizer.json")) as f:
        plain = json.load(f)
    plain["added_tokens"] = [a for a in plain["added_tokens"] if a["content"] == "<|endoftext|>"]
    with open(os.path.join(other, "tokenizer.json"), "w") as f:
        json.dump(plain, f)
    qwen = CHATML.replace("{% for", "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
                                    "a helpful assistant.<|im_end|>\\n' }}{% endif %}{% for", 1)
    with open(os.path.join(other, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": qwen}, f)
    cases = [
        ("a template it does not render", [f"data.path={data}", f"data.tokenizer={other}/tokenizer.json"],
         "tokenizer_config.json"),
        ("a tokenizer without the template's tokens",
         [f"data.path={data}", f"data.tokenizer={other}/tokenizer.json", "data.chat_template=chatml"], "<|im_start|>"),
        ("a line that is not JSON", [f"data.path={bad}"], "line 2"),
        ("a role it does not know", [f"data.path={bad}.role"], "tool"),
        ("a masked language model", [f"data.path={data}", "model.type=bert", "model.init_from="], "masked"),
    ]
    with open(bad, "w") as f:
        f.write('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
        f.write('{"messages": [{"role": "user", "content": "hi"\n')
    with open(bad + ".role", "w") as f:
        f.write('{"messages": [{"role": "tool", "content": "{}"}]}\n')
    for what, sets, needle in cases:
        args = [tidal, "data", *base]
        for s in sets:
            args += ["--set", s]
        r = subprocess.run(args, capture_output=True, text=True)
        message = (r.stdout + r.stderr).strip()
        if r.returncode != 2 or needle not in message:
            fail(f"{what}: exit {r.returncode} (want 2), message naming {needle!r}: {message[-600:]}")
        else:
            print(f"ok   {what}: exit 2: {message.splitlines()[-1][:160]}")


def main():
    tidal, mpirun = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as root:
        chatml = check(tidal, mpirun, root, "chatml", CHATML, "gpt2",
                       {"n_layer": "2", "n_head": "2", "n_embd": "32", "n_positions": "128"}, from_tokenizer=True)
        check(tidal, mpirun, root, "llama3", LLAMA3, "llama",
              {"num_hidden_layers": "2", "num_attention_heads": "4", "num_key_value_heads": "2", "hidden_size": "32",
               "intermediate_size": "48", "max_position_embeddings": "128"}, from_tokenizer=False)
        if chatml:
            check_errors(tidal, root, *chatml)
    if failures:
        print(f"{failures} failures")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
