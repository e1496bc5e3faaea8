#!/usr/bin/env python3
"""Tokenizer speed: `tidal tokenize` against Hugging Face `tokenizers` (encode_batch), in one run,
on the same threads, tokenizer.json and documents; the ids are checked to agree.

Documents: the mixed corpus of tests/oracle/check_tokenizer.py (prose with contractions, accented
Latin, other scripts, CJK, emoji, code, digits, Unicode white space), --size MB of it, one file per
document, or with --jsonl one JSON line per document ({"text": ...}: tidal --json-key text, the
strings for `tokenizers`); or --input FILE, one document per line (tidal --lines, the lines for
`tokenizers`).
Tokenizer: --tokenizer tokenizer.json (GPT-2's, say), else a byte-level BPE of --vocab tokens trained
by `tokenizers` on the first 8 MB of the documents, as the test trains its own.

Timed: tidal's own time (mapping the files, encoding on the threads and writing the shard in order
as it goes, as it reports: loading tokenizer.json is outside) and its process's wall time; `tokenizers`' encode_batch over
the documents already in memory as Python strings (RAYON_NUM_THREADS = --threads), with a fresh
Tokenizer each repeat so that neither starts with a warm cache. Best of --repeats for each.

usage: bench/tokenizer_vs_hf.py [--tidal build/src/tidal] [--threads 2] [--size 50] [--vocab 32000]
           [--tokenizer tokenizer.json] [--input corpus.txt | --jsonl] [--repeats 3]
(run with the oracle venv's python: ~/.cache/tidal/oracle-venv/bin/python, scripts/oracle-venv.sh)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tidal", default=os.path.join(root, "build", "src", "tidal"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", type=float, default=50, help="MB of generated documents")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary of the trained tokenizer")
    p.add_argument("--tokenizer", help="a tokenizer.json to use instead of training one")
    p.add_argument("--input", help="a UTF-8 text, one document per line, instead of generated documents")
    p.add_argument("--jsonl", action="store_true", help="the generated documents as one JSON-lines file")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    # Rayon sizes its pool on first use: before `tokenizers` is imported.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    sys.path.insert(0, os.path.join(root, "tests", "oracle"))
    import tokenizers
    from check_tokenizer import make_documents, read_shard, train_tokenizer, write_documents
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as work:
        t0 = time.perf_counter()
        if args.input:
            with open(args.input, "rb") as f:
                text = f.read().decode()
            docs = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
            docs = [d for d in docs if d]
            files, tidal_mode = [args.input], ["--lines"]
        else:
            docs = make_documents(seed=7, total_bytes=int(args.size * 1e6), with_long_documents=False)
            if args.jsonl:
                corpus = os.path.join(work, "corpus.jsonl")
                with open(corpus, "w", encoding="utf-8") as f:
                    for d in docs:
                        f.write(json.dumps({"text": d}) + "\n")
                files, tidal_mode = [corpus], ["--json-key", "text"]
            else:
                os.makedirs(os.path.join(work, "docs"))
                files, tidal_mode = write_documents(docs, os.path.join(work, "docs")), []
        n_bytes = sum(len(d.encode()) for d in docs)
        print(f"documents: {len(docs)}, {n_bytes / 1e6:.1f} MB ({time.perf_counter() - t0:.0f} s to make)", flush=True)

        tokenizer_json = args.tokenizer
        if not tokenizer_json:
            t0 = time.perf_counter()
            tokenizer_json = os.path.join(work, "tokenizer.json")
            sample, size = [], 0
            for d in docs:
                if size > 8e6:
                    break
                sample.append(d)
                size += len(d.encode())
            train_tokenizer(sample, tokenizer_json, vocab_size=args.vocab)
            print(f"trained a byte-level BPE of {args.vocab} tokens on {size / 1e6:.1f} MB "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        vocab = Tokenizer.from_file(tokenizer_json).get_vocab_size()

        out = os.path.join(work, "out.bin")
        tidal_best, tidal_wall = float("inf"), float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = subprocess.run([args.tidal, "tokenize", "--tokenizer", tokenizer_json, "-o", out, "--threads",
                                str(args.threads), *tidal_mode, *files], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit(f"tidal tokenize failed ({r.returncode}): {r.stderr.strip()}")
            seconds = float(r.stdout.split(" in ")[1].split(" s ")[0])  # "... tokens in 1.23 s (..."
            tidal_best, tidal_wall = min(tidal_best, seconds), min(tidal_wall, wall)
        print(f"tidal: {r.stdout.strip()}", flush=True)

        hf_best, encodings = float("inf"), None
        for _ in range(args.repeats):
            tok = Tokenizer.from_file(tokenizer_json)  # a cold cache, as tidal's process starts with
            t0 = time.perf_counter()
            encodings = tok.encode_batch(docs)
            hf_best = min(hf_best, time.perf_counter() - t0)

        eot = tok.token_to_id("<|endoftext|>")
        want = []
        for i, e in enumerate(encodings):
            if i:
                want.append(eot)
            want.extend(e.ids)
        _, got = read_shard(out)
        agree = got == want
        if not agree:
            k = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            print(f"MISMATCH: the ids differ first at position {k} of {len(want)} "
                  "(tests/oracle/check_tokenizer.py finds the document)")

        mb = n_bytes / 1e6
        config = {"threads": args.threads, "input_mb": round(mb, 1), "documents": len(docs), "vocab": vocab,
                  "input": "jsonl" if args.jsonl else "lines" if args.input else "files",
                  "tokenizer": args.tokenizer or f"trained ({args.vocab})", "tokenizers": tokenizers.__version__,
                  "cores": os.cpu_count()}
        print(f"config: {json.dumps(config)}")
        print(f"tidal tokenize      {mb / tidal_best:8.1f} MB/s  ({tidal_best:.2f} s reading, encoding and writing; "
              f"process wall {tidal_wall:.2f} s = {mb / tidal_wall:.1f} MB/s, the rest is loading tokenizer.json)")
        print(f"tokenizers {tokenizers.__version__:8} {mb / hf_best:8.1f} MB/s  ({hf_best:.2f} s encode_batch)")
        print(f"ratio tidal / tokenizers: {hf_best / tidal_best:.2f}x (process wall: {hf_best / tidal_wall:.2f}x); "
              f"ids agree: {'yes' if agree else 'NO'}")
        print(json.dumps({"bench": "tokenizer_vs_hf", **config, "tidal_mb_s": round(mb / tidal_best, 2),
                          "tidal_wall_mb_s": round(mb / tidal_wall, 2), "tokenizers_mb_s": round(mb / hf_best, 2),
                          "ratio": round(hf_best / tidal_best, 3), "ids_agree": agree}))
        if not agree:
            sys.exit(1)


if __name__ == "__main__":
    main()
