#!/usr/bin/env python3
"""`tidal tokenize` against Hugging Face `tokenizers`: the ids of every document must be
Tokenizer.from_file(json).encode(text).ids, with the end-of-text id between documents.

A seeded corpus (prose with contractions, accented Latin in composed and decomposed forms, Greek,
Cyrillic, Arabic, Devanagari, CJK, emoji with ZWJ sequences and skin tones, source code, digits of
several scripts, runs of tabs, spaces, newlines, \r\n, non-breaking and other Unicode spaces) trains
a byte-level BPE (vocab 2000, <|endoftext|>) with `tokenizers`; tidal tokenizes the documents, one
file each, and the ids are compared. One document is over 1 MiB (tidal encodes it in parallel
chunks), one holds a 60 KB piece without spaces (a long merge), and 3000 are short random strings
from an alphabet where the pattern's alternatives meet. Then: --lines on one file;
the thread count does not change the output; variants of the tokenizer.json (add_prefix_space,
use_regex false, ignore_merges, lstrip/rstrip and extra added tokens of both kinds); a WordPiece
tokenizer.json is refused (exit 2, the file named). Exit 1 on a mismatch, with the first differing
document and position.

usage: check_tokenizer.py path/to/tidal    (run with the oracle venv's python: scripts/oracle-venv.sh)
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while last").split()
CONTRACTIONS = ["don't", "I'M", "they'll", "it's", "we've", "you're", "I'd", "can't", "she'S", "o'clock", "'tis",
                "rock 'n' roll", "the cat's", "James'", "''quoted''", "isn't", "We'LL", "y'all", "he'd've"]
LATIN = ("café naïve Größe São Paulo Tiếng Việt łódź Ærøskøbing smörgåsbord façade jalapeño déjà-vu Fußball "
         "crème brûlée señor Ñandú Œuvre İstanbul ĳssel").split()
DECOMPOSED = ["cafe\u0301", "nai\u0308ve", "A\u030angstro\u0308m", "Vie\u0323\u0302t"]
SCRIPTS = ["Αλφα βήτα γάμμα", "Привет, как дела?", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
           "გამარჯობა", "Բարեւ", "ሰላም ልዑል"]
CJK_RANGES = [(0x4E00, 0x9FA5), (0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3)]
CJK_PUNCT = ["，", "。", "、", "「", "」", "！", "？", "\u3000"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "1️⃣", "🧑🏿‍💻", "❤️", "🤷‍♀️", "👋🏻", "✨", "🐍", "⚡"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0", "\u00a0\u00a0", "\u2003",
          "\u2009", "\u202f", "\u205f", "\u3000", "\u1680", "\u0085", "\u2028", "\u2029", "\x0b", "\x0c", "\u200b",
          "\ufeff", " \t ", "    \n\t", "\x1c\x1d\x1e\x1f", "\u180e", "\x00", "\x7f"]
DIGITS = ["0", "42", "3.14159", "1,000,000", "2024-05-20", "٣٤٥", "१२३", "１２３", "²", "Ⅻ", "½", "007", "0x1F"]
CODE = [
    "def f(x, y=2):\n    return x ** y  # power\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "if (err != nil) { return fmt.Errorf(\"bad: %w\", err) }\n",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
    "    x = [i*i for i in range(10) if i % 2 == 0]\n\n\n",
    "const f = async () => { await fetch('/api?q=1&r=2'); };\n",
    "<div class=\"a\">&nbsp;Hello</div>\n",
    "$ ls -la | grep '^d' >> out.txt 2>&1\n",
]


def cjk_run(rng, n):
    lo, hi = rng.choice(CJK_RANGES)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def segment(rng):
    """One stretch of a document; the kinds are mixed within documents."""
    kind = rng.randrange(10)
    if kind <= 2:
        words = [rng.choice(WORDS) if rng.random() < 0.85 else rng.choice(CONTRACTIONS)
                 for _ in range(rng.randint(4, 30))]
        if rng.random() < 0.5:
            words[0] = words[0].capitalize()
        return " ".join(words) + rng.choice([". ", ", ", "! ", "? ", ".\n", "\n\n", ";", " -- "])
    if kind == 3:
        return " ".join(rng.choice(LATIN + DECOMPOSED) for _ in range(rng.randint(2, 12))) + rng.choice([". ", "\n"])
    if kind == 4:
        return "".join(cjk_run(rng, rng.randint(1, 30)) + rng.choice(CJK_PUNCT) for _ in range(rng.randint(1, 5)))
    if kind == 5:
        return rng.choice(SCRIPTS) + rng.choice([" ", "\n", "، ", "। "])
    if kind == 6:
        return "".join(rng.choice(EMOJI) + rng.choice(["", " ", "", "!"]) for _ in range(rng.randint(1, 6)))
    if kind == 7:
        return rng.choice(CODE)
    if kind == 8:
        return rng.choice(DIGITS) + rng.choice(["", " ", "%", "px", " km", "th"]) + rng.choice(SPACES)
    return rng.choice(SPACES)


def make_document(rng, min_chars):
    parts, size = [], 0
    while size < min_chars:
        s = segment(rng)
        if rng.random() < 0.004:
            s += "<|endoftext|>"  # an added token inside a document is split out, as `tokenizers` does
        parts.append(s)
        size += len(s)
    return "".join(parts) + rng.choice(["", "", "\n", "   ", "\t\n", " "])


# Short strings from a small alphabet where the pattern's alternatives meet: contractions, runs of
# every kind of white space, letters and numbers of several scripts, marks, symbols, added tokens.
FUZZ_ALPHABET = ["a", "Z", "s", "t", "re", "ve", "m", "M", "ll", "d", "'", "\u00e9", "\u4e2d", "1", "\u0663", "\u00b2",
                 "\u2167", " ", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2028", "\x0b", "\x85", "!", ".",
                 "\U0001F600", "\u200d", "\u0301", "\ufe0f", "\x1f", "<|endoftext|>", "_", "-"]


def fuzz_documents(seed, count):
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def make_documents(seed, total_bytes, with_long_documents=True):
    """Documents of mixed text summing to at least total_bytes of UTF-8; seeded."""
    rng = random.Random(seed)
    docs, size = [], 0
    if with_long_documents:
        # Over 1 MiB with newlines: tidal cuts it into chunks at its split points.
        long_doc = make_document(rng, 1_200_000)
        # 20000 CJK characters without a space: one 60 KB pre-tokenizer piece.
        cjk = cjk_run(random.Random(seed + 1), 20000)
        docs += [long_doc, "intro\n" + cjk + "\nend"]
        size += sum(len(d.encode()) for d in docs)
    while size < total_bytes:
        d = make_document(rng, rng.choice([20, 200, 800, 2000, 6000]))
        docs.append(d)
        size += len(d.encode())
    return docs


def train_tokenizer(docs, path, vocab_size=2000):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    tok.save(path)
    return Tokenizer.from_file(path)


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520, f"{path}: bad magic {header[0]}"
        width = {1: "H", 2: "I"}[header[1]]
        body = f.read()
    ids = list(struct.unpack(f"<{header[2]}{width}", body))
    return header[1], ids


def write_documents(docs, directory):
    paths = []
    for i, d in enumerate(docs):
        p = os.path.join(directory, f"doc{i:05d}.txt")
        with open(p, "wb") as f:
            f.write(d.encode())
        paths.append(p)
    return paths


def run_tidal(tidal, tokenizer_json, out, files, *args):
    cmd = [tidal, "tokenize", "--tokenizer", tokenizer_json, "-o", out, *args, *files]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd[:6])} ... exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def compare(name, docs, encodings, got, eot):
    """got must be the documents' ids joined by eot; else report the first difference and exit 1."""
    at = 0
    for i, (doc, encoding) in enumerate(zip(docs, encodings)):
        want = encoding.ids
        if i > 0:
            if at >= len(got) or got[at] != eot:
                sys.exit(f"FAIL {name}: want the end-of-text id {eot} before document {i} at output position {at}, "
                         f"got {got[at] if at < len(got) else 'the end'}")
            at += 1
        have = got[at:at + len(want)]
        if have != want:
            k = next((k for k in range(len(want)) if k >= len(have) or have[k] != want[k]), len(want))
            print(f"FAIL {name}: document {i} ({len(doc)} characters) differs at token {k} of {len(want)}")
            print(f"  want {want[max(0, k - 5):k + 8]}\n  got  {have[max(0, k - 5):k + 8]}")
            char = encoding.offsets[min(k, len(want) - 1)][0] if want else 0
            print(f"  text there (character {char}): {doc[max(0, char - 20):char]!r} | {doc[char:char + 20]!r}")
            sys.exit(1)
        at += len(want)
    if at != len(got):
        sys.exit(f"FAIL {name}: {len(got) - at} tokens after the last document")
    print(f"ok   {name}: {len(docs)} documents, {len(got)} tokens equal")


def check_lines(tidal, tok, tokenizer_json, docs, directory):
    text = "\r\n".join(docs[:40]) + "\n\n\n" + "\n".join(d.replace("\r", "") for d in docs[40:120]) + "\n"
    path = os.path.join(directory, "lines.txt")
    with open(path, "wb") as f:
        f.write(text.encode())
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    lines = [line for line in lines if line]
    out = os.path.join(directory, "lines.bin")
    run_tidal(tidal, tokenizer_json, out, [path], "--lines", "--threads", "2")
    version, got = read_shard(out)
    if version != 1:
        sys.exit(f"FAIL --lines: want uint16 tokens (version 1) for vocab {tok.get_vocab_size()}, got {version}")
    compare("--lines", lines, tok.encode_batch(lines), got, tok.token_to_id("<|endoftext|>"))


def check_json_lines(tidal, tok, tokenizer_json, docs, directory):
    """JSON lines (--json-key text) into a Megatron indexed dataset with --append-eod, read back by
    megatron-core's IndexedDataset: a sequence a document, its ids and the end-of-text id; and into
    llm.c shards of 50000 tokens, which joined are the same ids."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from megatron_reference import load_megatron
    path = os.path.join(directory, "docs.jsonl")
    chosen = [d for d in docs[2:600] if d.strip()]  # the long documents elsewhere; a few hundred records
    with open(path, "w") as f:
        for i, d in enumerate(chosen):
            f.write(json.dumps({"id": i, "text": d}) + "\n")
    eot = tok.token_to_id("<|endoftext|>")
    want = [e.ids + [eot] for e in tok.encode_batch(chosen)]
    prefix = os.path.join(directory, "indexed")
    run_tidal(tidal, tokenizer_json, prefix, [path], "--json-key", "text", "--format", "indexed", "--append-eod", "-j", "2")
    ds = load_megatron().IndexedDataset(prefix)
    if len(ds) != len(want) or list(ds.document_indices) != list(range(len(want) + 1)):
        sys.exit(f"FAIL --format indexed: {len(ds)} sequences and document indices {list(ds.document_indices)[:5]}... "
                 f"for {len(want)} records")
    for i, ids in enumerate(want):
        if ds[i].tolist() != ids:
            sys.exit(f"FAIL --format indexed: record {i} differs: want {ids[:10]}..., megatron reads {ds[i][:10]}...")
    print(f"ok   --json-key --format indexed --append-eod: megatron-core reads {len(want)} documents as tokenizers "
          "encodes them")
    shards = os.path.join(directory, "jsonl_shards")
    run_tidal(tidal, tokenizer_json, shards, [path], "--json-key", "text", "--shard-size", "50000", "--append-eod")
    joined, names = [], sorted(n for n in os.listdir(directory) if n.startswith("jsonl_shards_"))
    for name in names:
        joined += read_shard(os.path.join(directory, name))[1]
    flat = [t for ids in want for t in ids]
    if joined != flat or len(names) != (len(flat) + 49999) // 50000:
        sys.exit(f"FAIL --shard-size: {len(names)} shards of {len(joined)} tokens, want {len(flat)} tokens")
    print(f"ok   --json-key --shard-size 50000 --append-eod: {len(names)} shards, {len(flat)} tokens equal")


def check_variants(tidal, base_json, docs, directory):
    """The same vocabulary with a prefix space, without the pattern, ignoring merges for whole-token
    pieces, and with stripping and more added tokens."""
    with open(base_json) as f:
        base = json.load(f)
    n = len(base["model"]["vocab"])
    variants = {}
    v = json.loads(json.dumps(base))
    v["pre_tokenizer"]["add_prefix_space"] = True
    variants["add_prefix_space"] = v
    v = json.loads(json.dumps(base))
    v["pre_tokenizer"]["use_regex"] = False
    variants["use_regex_false"] = v
    v = json.loads(json.dumps(base))
    v["model"]["ignore_merges"] = True
    variants["ignore_merges"] = v
    v = json.loads(json.dumps(base))
    v["added_tokens"][0].update(lstrip=True, rstrip=True)
    # "ing" is in the vocabulary: `tokenizers` gives it the vocabulary's id whatever "id" says, and
    # numbers the others from n on; tidal must do the same.
    v["added_tokens"] += [
        {"id": n, "content": "def ", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
         "special": False},
        {"id": n + 1, "content": "ing", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": False},
        {"id": n + 2, "content": "\u3000", "single_word": False, "lstrip": False, "rstrip": True, "normalized": True,
         "special": False},
        {"id": n + 3, "content": "<|endoftext|><|endoftext|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
    ]
    variants["added_tokens"] = v
    subset = docs[2:300] + docs[-1000:]  # the last are the fuzz strings
    files = write_documents(subset, os.path.join(directory, "variants"))
    for name, j in variants.items():
        path = os.path.join(directory, f"{name}.json")
        with open(path, "w") as f:
            json.dump(j, f)
        tok = Tokenizer.from_file(path)
        out = os.path.join(directory, f"{name}.bin")
        run_tidal(tidal, path, out, files, "--threads", "2")
        eot = tok.token_to_id("<|endoftext|>")
        compare(f"variant {name}", subset, tok.encode_batch(subset), read_shard(out)[1], eot)


def check_refused(tidal, base_json, directory):
    with open(base_json) as f:
        j = json.load(f)
    j["model"]["type"] = "WordPiece"
    path = os.path.join(directory, "wordpiece.json")
    with open(path, "w") as f:
        json.dump(j, f)
    r = subprocess.run([tidal, "tokenize", "--tokenizer", path, "-o", os.path.join(directory, "x.bin"), base_json],
                       capture_output=True, text=True)
    if r.returncode != 2 or path not in r.stderr or "WordPiece" not in r.stderr:
        sys.exit(f"FAIL WordPiece refused: exit {r.returncode} (want 2), stderr {r.stderr.strip()!r} should name "
                 f"{path} and WordPiece")
    print(f"ok   WordPiece refused: {r.stderr.strip()}")


def main():
    tidal = sys.argv[1]
    with tempfile.TemporaryDirectory() as directory:
        docs = make_documents(seed=20240520, total_bytes=3_000_000) + fuzz_documents(seed=5, count=3000)
        tokenizer_json = os.path.join(directory, "tokenizer.json")
        tok = train_tokenizer(docs, tokenizer_json)
        os.makedirs(os.path.join(directory, "docs"))
        os.makedirs(os.path.join(directory, "variants"))
        files = write_documents(docs, os.path.join(directory, "docs"))
        total = sum(len(d.encode()) for d in docs)
        print(f"corpus: {len(docs)} documents, {total} bytes; vocab {tok.get_vocab_size()}")
        eot = tok.token_to_id("<|endoftext|>")
        expected = tok.encode_batch(docs)
        outputs = {}
        for threads in ("1", "2", "3"):
            out = os.path.join(directory, f"corpus{threads}.bin")
            summary = run_tidal(tidal, tokenizer_json, out, files, "--threads", threads)
            print(f"     tidal --threads {threads}: {summary}")
            with open(out, "rb") as f:
                outputs[threads] = f.read()
        if not outputs["1"] == outputs["2"] == outputs["3"]:
            sys.exit("FAIL: the output depends on --threads")
        version, got = read_shard(os.path.join(directory, "corpus2.bin"))
        if version != 1:
            sys.exit(f"FAIL: want uint16 tokens (version 1) for vocab {tok.get_vocab_size()}, got version {version}")
        compare("documents", docs, expected, got, eot)
        check_lines(tidal, tok, tokenizer_json, docs, directory)
        check_json_lines(tidal, tok, tokenizer_json, docs, directory)
        check_variants(tidal, tokenizer_json, docs, directory)
        check_refused(tidal, tokenizer_json, directory)
    print("all tokenizer checks passed")


if __name__ == "__main__":
    main()
