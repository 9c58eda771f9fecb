#!/usr/bin/env python3
"""Trains the small GPT-2 model that kiln bundles (models/kjv-gpt2), from the King James Bible text
of the Debian package bible-kjv-text (public domain), and writes it as a Hugging Face checkpoint.

Self-contained: needs torch, transformers, tokenizers and safetensors, nothing of kiln.

What it does, in order:
  1. reads the text: the package's /usr/lib/bible.data (the "EC02" file of Chip Chapin's Bible
     Retrieval System: 64 KiB blocks, each a Unix-compress (LZW) stream, decoded here in Python), or a
     folder holding it (the .deb extracted with dpkg-deb -x), or a plain text file of lines
     "Ge1:1 In the beginning ..."; verse references are stripped and each chapter becomes one
     paragraph of prose (verses joined by a space);
  2. holds out every 50th chapter (2 %) as validation;
  3. trains a byte-level BPE tokenizer (vocabulary 8192, "<|endoftext|>" special) on the training
     chapters;
  4. trains a GPT2LMHeadModel (transformers) on the token stream, one "<|endoftext|>" before each
     chapter: AdamW, bf16 autocast on CUDA, warmup then constant learning rate while the validation
     loss improves, then a short linear decay from the best point ("warmup-stable-decay" whose decay
     starts when validation stops improving, or when the time budget runs short); the weights with
     the lowest validation loss are kept;
  5. writes OUT/: config.json, model.safetensors (F16; tied embeddings stored once as wte; names as the
     hub's gpt2 checkpoint: "wte.weight", "h.0.attn.c_attn.weight" in Conv1D [in, out] layout, ...),
     generation_config.json, tokenizer.json, vocab.json, merges.txt, tokenizer_config.json and
     train_log.txt (hyper-parameters, data, per-eval losses, wall time, device, final validation
     loss and perplexity, sample generations);
  6. reloads OUT/ with GPT2LMHeadModel.from_pretrained and tokenizers.Tokenizer.from_file, checks
     that every weight loaded and that the reloaded model's loss matches, and generates from it.

GPU (the bundled model; about 2.5 minutes on one H200 in all):
    python3 scripts/train_bundled_model.py --data dist/kjv --out models/kjv-gpt2 --time-budget 120
CPU smoke test (seconds):
    python3 scripts/train_bundled_model.py --data dist/kjv --out /tmp/kjv-smoke --device cpu \
        --max-steps 5 --time-budget 30 --tiny
"""
import argparse
import copy
import gzip
import hashlib
import json
import math
import os
import platform
import random
import re
import struct
import sys
import time

T_START = time.time()

DEFAULT_DATA = "/usr/lib/bible.data"  # where bible-kjv-text installs the text
PACKAGE = "bible-kjv-text"
EOS = "<|endoftext|>"


# ---------------------------------------------------------------------------------------- log

class Log:
    """Prints and keeps every line; write() puts them into OUT/train_log.txt."""

    def __init__(self):
        self.lines = []

    def __call__(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.lines.append(line)

    def write(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(self.lines) + "\n")


log = Log()


# ----------------------------------------------------------------------------- reading the text

def lzw_decompress(data, maxbits, block_mode):
    """Decodes one Unix compress(1) (".Z") code stream with its 3-byte header removed.

    Codes are little-endian bit-packed, 9 bits wide at first, one bit wider each time the table
    fills its width, up to maxbits. Codes are written in groups of 8: on a width change or a CLEAR
    (256, in block mode) the rest of the current group is padding, skipped here as compress does."""
    buf = bytes(data) + b"\0\0\0\0"
    total_bits = len(data) * 8
    maxmaxcode = 1 << maxbits
    table = [bytes([i]) for i in range(256)] + [b""] * (maxmaxcode + 1 - 256)
    first_free = 257 if block_mode else 256
    free_ent = first_free
    n_bits = 9
    maxcode = (1 << n_bits) - 1
    mask = maxcode
    pos = 0
    group_start = 0
    prev = -1
    out = []

    def skip_group(p):
        g = n_bits * 8
        r = (p - group_start) % g
        return p if r == 0 else p + g - r

    while True:
        if free_ent > maxcode:
            pos = skip_group(pos)
            group_start = pos
            n_bits += 1
            maxcode = maxmaxcode if n_bits == maxbits else (1 << n_bits) - 1
            mask = (1 << n_bits) - 1
        if pos + n_bits > total_bits:
            break
        i = pos >> 3
        code = ((buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16)) >> (pos & 7)) & mask
        pos += n_bits
        if prev == -1:
            if code >= 256:
                raise ValueError("LZW stream starts with code %d" % code)
            out.append(table[code])
            prev = code
            continue
        if code == 256 and block_mode:
            free_ent = first_free - 1
            pos = skip_group(pos)
            group_start = pos
            n_bits = 9
            maxcode = mask = (1 << n_bits) - 1
            continue
        if code < free_ent:
            entry = table[code]
        elif code == free_ent:
            entry = table[prev] + table[prev][:1]
        else:
            raise ValueError("LZW code %d beyond the table (%d)" % (code, free_ent))
        out.append(entry)
        if free_ent < maxmaxcode:
            table[free_ent] = table[prev] + entry[:1]
            free_ent += 1
        prev = code
    return b"".join(out)


def read_ec02(path):
    """The text of a bible-kjv "EC02" compressed data file (bible.data): a header with the
    uncompressed block size, the block count and the file offset of each block (big-endian), one
    compress header (1f 9d, flags) before the first block, then the blocks' LZW streams."""
    with open(path, "rb") as f:
        d = f.read()
    if not d.startswith(b"EC02"):
        raise ValueError("%s: not an EC02 compressed data file" % path)
    block_size, n_blocks = struct.unpack(">II", d[0x54:0x5C])
    offs = struct.unpack(">%dI" % (n_blocks + 1), d[0x5C:0x5C + 4 * (n_blocks + 1)])
    if offs[-1] != len(d) or d[offs[0] - 3:offs[0] - 1] != b"\x1f\x9d":
        raise ValueError("%s: unexpected EC02 layout" % path)
    flags = d[offs[0] - 1]
    maxbits, block_mode = flags & 0x1F, bool(flags & 0x80)
    parts = []
    for b in range(n_blocks):
        part = lzw_decompress(d[offs[b]:offs[b + 1]], maxbits, block_mode)
        if b < n_blocks - 1 and len(part) != block_size:
            raise ValueError("%s: block %d decoded to %d bytes, not %d" % (path, b, len(part), block_size))
        parts.append(part)
    return b"".join(parts).decode("ascii")


VERSE_RE = re.compile(r"^\s*(\d?\s?[A-Za-z]+)\s?(\d+):(\d+)\s+(.*\S)\s*$")


def text_to_chapters(text):
    """Chapters of prose: lines "Book C:V text" grouped by (book, chapter), references stripped,
    verses joined by a space. Text without such references: paragraphs split at blank lines."""
    chapters, keys, n_verses = {}, [], 0
    other = []
    for line in text.splitlines():
        m = VERSE_RE.match(line)
        if m:
            key = (m.group(1).replace(" ", ""), int(m.group(2)))
            if key not in chapters:
                chapters[key] = []
                keys.append(key)
            chapters[key].append(" ".join(m.group(4).split()))
            n_verses += 1
        else:
            other.append(line)
    if n_verses:
        return [" ".join(chapters[k]) for k in keys], n_verses
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", "\n".join(other))]
    return [p for p in paras if p], 0


def find_source(data):
    """The file to read for --data: a file itself, or the bible.data / *.txt files under a folder."""
    if os.path.isfile(data):
        return [data]
    if os.path.isdir(data):
        for root, _dirs, files in sorted(os.walk(data)):
            if "bible.data" in files:
                return [os.path.join(root, "bible.data")]
        txt = sorted(os.path.join(r, f) for r, _d, fs in os.walk(data) for f in fs if f.endswith(".txt"))
        if txt:
            return txt
    raise SystemExit("no text at %s: install %s (apt-get install %s) or pass --data with the extracted "
                     ".deb folder (dpkg-deb -x %s_*.deb dist/kjv)" % (data, PACKAGE, PACKAGE, PACKAGE))


def package_version(src):
    """The bible-kjv-text version from the package's changelog next to the data, if it is there."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(src))))  # .../usr/lib/x -> ...
    for cand in (os.path.join(root, "usr/share/doc", PACKAGE, "changelog.gz"),
                 os.path.join("/usr/share/doc", PACKAGE, "changelog.gz")):
        if os.path.isfile(cand):
            with gzip.open(cand, "rt", errors="replace") as f:
                m = re.match(r"\S+ \(([^)]+)\)", f.readline())
            if m:
                return m.group(1)
    return "unknown"


def load_corpus(data):
    files = find_source(data)
    texts, sha = [], hashlib.sha256()
    for p in files:
        with open(p, "rb") as f:
            raw = f.read()
        sha.update(raw)
        texts.append(read_ec02(p) if raw.startswith(b"EC02") else raw.decode("utf-8", errors="replace"))
    text = "\n".join(texts)
    chapters, n_verses = text_to_chapters(text)
    return files, sha.hexdigest(), text, chapters, n_verses


# ------------------------------------------------------------------------------------ tokenizer

def train_tokenizer(docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    return tok


def token_stream(tok, docs, eos_id):
    ids = []
    for enc in tok.encode_batch(docs):
        ids.append(eos_id)
        ids.extend(enc.ids)
    return ids


# ----------------------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="bible.data (EC02), a folder holding it (an extracted .deb), or a text file/folder")
    p.add_argument("--out", default="models/kjv-gpt2", help="output checkpoint folder")
    p.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--val-every", type=int, default=50, help="hold out every Nth chapter (50: 2%%)")
    # model
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-positions", type=int, default=256, help="context length, also the training length")
    p.add_argument("--dropout", type=float, default=0.2, help="embedding, residual and attention dropout")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny model for smoke tests: 2 layers, 64 wide, vocab 1024, context 64, batch 8")
    # optimisation
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.01, help="lr at the end of the decay / peak lr")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--decay-frac", type=float, default=0.25,
                   help="decay length as a fraction of the steps before it")
    p.add_argument("--min-decay-steps", type=int, default=200)
    p.add_argument("--patience", type=int, default=5,
                   help="evaluations without a better validation loss before the decay starts")
    p.add_argument("--eval-every", type=int, default=100, help="steps between validation evaluations")
    p.add_argument("--time-budget", type=float, default=120.0, help="seconds of training (the step loop)")
    p.add_argument("--wall-budget", type=float, default=150.0,
                   help="seconds for the whole run; training stops early enough to save within it")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (compile time counts)")
    # output
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16", help="weights in model.safetensors")
    p.add_argument("--names", choices=["hub", "transformers"], default="hub",
                   help="tensor names: hub ('h.0.ln_1.weight', as the gpt2 hub checkpoint) or "
                        "transformers ('transformer.h.0.ln_1.weight', as save_pretrained writes)")
    p.add_argument("--sample-tokens", type=int, default=60)
    p.add_argument("--max-size-mb", type=float, default=40.0, help="fail if OUT/ is larger")
    a = p.parse_args(argv)
    if a.tiny:
        a.n_layer, a.n_embd, a.n_head, a.vocab_size, a.n_positions = 2, 64, 2, 1024, 64
        a.batch_size = min(a.batch_size, 8)
    return a


def main(argv=None):
    a = parse_args(argv)
    random.seed(a.seed)

    import numpy as np
    import torch
    import torch.nn.functional as F
    import tokenizers
    import transformers
    import safetensors
    from safetensors.torch import save_file
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)

    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.manual_seed_all(a.seed)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        dev_name = torch.cuda.get_device_name(dev)
    else:
        dev_name = "cpu (%s, %d threads)" % (platform.processor() or platform.machine(), torch.get_num_threads())
    os.makedirs(a.out, exist_ok=True)

    log("# kiln bundled model: GPT-2 trained on the King James Bible (%s)" % PACKAGE)
    log("command: %s" % " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])))
    log("started: %s UTC" % time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T_START)))
    log("device: %s" % dev_name)
    log("software: python %s, torch %s, transformers %s, tokenizers %s, safetensors %s" % (
        platform.python_version(), torch.__version__, transformers.__version__, tokenizers.__version__,
        safetensors.__version__))
    log("hyper-parameters: " + json.dumps({k: v for k, v in vars(a).items() if k not in ("out",)}, sort_keys=True))

    # ---- data
    t0 = time.time()
    files, sha, text, chapters, n_verses = load_corpus(a.data)
    version = package_version(files[0])
    val_idx = set(range(a.val_every // 2, len(chapters), a.val_every)) if a.val_every > 0 else set()
    train_docs = [c for i, c in enumerate(chapters) if i not in val_idx]
    val_docs = [c for i, c in enumerate(chapters) if i in val_idx]
    log("data: %s (package %s %s, public domain), sha256 %s" % (", ".join(files), PACKAGE, version, sha))
    log("data: %d chars decoded, %d verses, %d chapters -> %d train / %d validation chapters; "
        "%d chars of prose; read in %.1f s" % (len(text), n_verses, len(chapters), len(train_docs),
                                                len(val_docs), sum(len(c) for c in chapters), time.time() - t0))
    log("data sample: %r" % (chapters[0][:160],))

    t0 = time.time()
    tok = train_tokenizer(train_docs, a.vocab_size)
    eos_id = tok.token_to_id(EOS)
    vocab = tok.get_vocab_size()
    train_ids = token_stream(tok, train_docs, eos_id)
    val_ids = token_stream(tok, val_docs, eos_id)
    log("tokenizer: byte-level BPE, vocabulary %d (asked %d), %s = %d; trained and applied in %.1f s" % (
        vocab, a.vocab_size, EOS, eos_id, time.time() - t0))
    log("tokens: %d train, %d validation, %d in all (%.2f chars/token)" % (
        len(train_ids), len(val_ids), len(train_ids) + len(val_ids),
        sum(len(c) for c in chapters) / max(1, len(train_ids) + len(val_ids))))

    T = a.n_positions
    train_t = torch.tensor(train_ids, dtype=torch.long, device=dev)
    val_t = torch.tensor(val_ids, dtype=torch.long)
    n_val_win = max(1, (len(val_ids) - 1) // T)
    vx = torch.stack([val_t[i * T:i * T + T] for i in range(n_val_win)]).to(dev)
    vy = torch.stack([val_t[i * T + 1:i * T + T + 1] for i in range(n_val_win)]).to(dev)
    offs = torch.arange(T + 1, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)

    def batch():
        starts = torch.randint(0, len(train_ids) - T - 1, (a.batch_size, 1), device=dev, generator=gen)
        w = train_t[starts + offs]
        return w[:, :-1], w[:, 1:]

    # ---- model
    cfg = GPT2Config(vocab_size=vocab, n_positions=T, n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=a.dropout,
                     embd_pdrop=a.dropout, attn_pdrop=a.dropout, bos_token_id=eos_id, eos_token_id=eos_id,
                     tie_word_embeddings=True, use_cache=False)
    model = GPT2LMHeadModel(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    bytes_per = 2 if a.dtype == "f16" else 4
    log("model: GPT-2, %d layers, width %d, %d heads, context %d, vocabulary %d: %d parameters "
        "(%.2f M), %.1f MB as %s" % (a.n_layer, a.n_embd, a.n_head, T, vocab, n_params, n_params / 1e6,
                                     n_params * bytes_per / 1e6, a.dtype.upper()))
    fwd = torch.compile(model) if a.compile else model

    decay, no_decay = [], []
    for _n, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt_kw = {"fused": True} if cuda else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8, **opt_kw)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)

    def loss_of(m, x, y):
        with amp:
            logits = m(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    eval_s = [0.0]

    @torch.no_grad()
    def evaluate(m, bs=64):
        t_eval = time.time()
        m.eval()
        tot = 0.0
        for i in range(0, n_val_win, bs):
            tot += loss_of(m, vx[i:i + bs], vy[i:i + bs]).item() * vx[i:i + bs].size(0)
        m.train()
        eval_s[0] += time.time() - t_eval
        return tot / n_val_win

    def _clone_opt(sd):
        return copy.deepcopy(sd)

    # ---- training
    tokens_per_step = a.batch_size * T
    log("training: batch %d x %d = %d tokens/step, AdamW lr %g (betas 0.9/%g, wd %g), warmup %d steps, "
        "constant until validation stops improving (patience %d evals of %d steps), then linear decay "
        "to %g over %.0f%% of the steps so far; budget %.0f s training, %.0f s wall" % (
            a.batch_size, T, tokens_per_step, a.lr, a.beta2, a.weight_decay, a.warmup_steps, a.patience,
            a.eval_every, a.lr * a.min_lr_ratio, 100 * a.decay_frac, a.time_budget, a.wall_budget))
    t_train = time.time()
    # stop training early enough to save, reload and sample within the wall budget
    reserve = 12.0 if cuda else 5.0
    deadline = min(t_train + a.time_budget, T_START + a.wall_budget - reserve)
    model.train()
    best = (float("inf"), 0)
    best_state = None
    stale = 0
    decay_start = decay_len = None
    step = 0
    loss_sum = torch.zeros((), device=dev)
    n_sum = 0
    warm = max(1, min(a.warmup_steps, a.max_steps // 5 if a.max_steps else a.warmup_steps))
    log("%6s %9s %9s %10s %8s %8s" % ("step", "train", "val", "lr", "time_s", "epochs"))

    def lr_at(s):
        if decay_start is not None:
            frac = min(1.0, (s - decay_start) / max(1, decay_len))
            return a.lr * (1.0 - frac * (1.0 - a.min_lr_ratio))
        return a.lr * min(1.0, (s + 1) / warm)

    def start_decay(reason, restore):
        nonlocal decay_start, decay_len, step
        if restore and best_state is not None and best[1] != step:
            model.load_state_dict(best_state[0])
            opt.load_state_dict(best_state[1])
            step = best[1]
        elapsed = time.time() - t_train
        per_step = elapsed / max(1, step_count)
        by_time = int((deadline - time.time()) / max(per_step, 1e-6) * 0.95)
        want = max(a.min_decay_steps, int(a.decay_frac * step))
        if a.max_steps:
            want = min(want, max(1, a.max_steps - step))
        decay_start, decay_len = step, max(1, min(want, by_time))
        log("decay: %s; from step %d%s, %d steps" % (
            reason, step, " (restored, val %.4f)" % best[0] if restore and best_state else "", decay_len))

    step_count = 0  # steps actually run (a restore rewinds `step`, not this)
    while True:
        now = time.time()
        if decay_start is None:
            left = deadline - now
            per_step = (now - t_train) / max(1, step_count)
            if step_count > 20 and left < per_step * max(a.min_decay_steps, a.decay_frac * step) * 1.05:
                start_decay("time budget", False)
            elif a.max_steps and step >= a.max_steps - max(1, int(a.max_steps * a.decay_frac / (1 + a.decay_frac))):
                start_decay("max steps", False)
        elif step >= decay_start + decay_len:
            break
        if now >= deadline or (a.max_steps and step_count >= a.max_steps):
            break
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        loss = loss_of(fwd, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        step += 1
        step_count += 1
        loss_sum += loss.detach()
        n_sum += 1
        last = (decay_start is not None and step >= decay_start + decay_len) or \
            (a.max_steps and step_count >= a.max_steps) or time.time() >= deadline
        if step % a.eval_every == 0 or last or step_count == 1:
            vl = evaluate(fwd)
            tl = (loss_sum / n_sum).item()
            loss_sum.zero_()
            n_sum = 0
            el = time.time() - t_train
            log("%6d %9.4f %9.4f %10.3g %8.1f %8.2f" % (step, tl, vl, lr, el, step * tokens_per_step / len(train_ids)))
            if vl < best[0]:
                best = (vl, step)
                best_state = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                              _clone_opt(opt.state_dict()))
                stale = 0
            else:
                stale += 1
                if decay_start is None and stale >= a.patience:
                    start_decay("validation loss has not improved for %d evaluations" % stale, True)
                    stale = 0
    if cuda:
        torch.cuda.synchronize()
    train_s = time.time() - t_train
    step_s = max(1e-9, train_s - eval_s[0])
    log("training: %d steps run in %.1f s (%.1f s of it evaluating): %.1f ms/step, %.0f tokens/s, %.1f epochs; "
        "best validation loss %.4f at step %d" % (
            step_count, train_s, eval_s[0], 1000 * step_s / max(1, step_count), step_count * tokens_per_step / step_s,
            step_count * tokens_per_step / len(train_ids), best[0], best[1]))
    model.load_state_dict(best_state[0])
    model.eval()
    final_val = evaluate(model)
    log("final: validation loss %.4f, perplexity %.2f (tokens of this %d-entry vocabulary)" % (
        final_val, math.exp(final_val), vocab))

    # ---- save
    t0 = time.time()
    out = a.out
    tok.save(os.path.join(out, "tokenizer.json"))
    tok.model.save(out)  # vocab.json, merges.txt
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": T, "bos_token": EOS,
                   "eos_token": EOS, "unk_token": EOS, "add_prefix_space": False, "add_bos_token": False,
                   "clean_up_tokenization_spaces": False}, f, indent=2)
    model.config.use_cache = True
    model.config.save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        cj = json.load(f)
    cj.update({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": a.n_layer,
               "n_embd": a.n_embd, "n_head": a.n_head, "n_positions": T, "n_ctx": T, "vocab_size": vocab,
               "bos_token_id": eos_id, "eos_token_id": eos_id, "tie_word_embeddings": True,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cj, f, indent=2, sort_keys=True)
        f.write("\n")
    GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, do_sample=True, top_k=40,
                     temperature=0.8).save_pretrained(out)
    sd_dtype = torch.float16 if a.dtype == "f16" else torch.float32
    prefix = "" if a.names == "hub" else "transformer."
    tensors = {}
    for n, p in model.transformer.named_parameters():
        t = p.detach().to("cpu", sd_dtype).contiguous()
        if a.dtype == "f16" and not torch.isfinite(t).all():
            raise SystemExit("%s does not fit F16" % n)
        tensors[prefix + n] = t
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)
    log("saved: %s (%s weights, %d tensors, names like %s) in %.1f s" % (
        out, a.dtype.upper(), len(tensors), ", ".join(sorted(tensors)[:3]), time.time() - t0))

    # ---- reload and check, then sample from what was saved
    from tokenizers import Tokenizer
    tok2 = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    m2, info = GPT2LMHeadModel.from_pretrained(out, output_loading_info=True, torch_dtype=torch.float32) \
        if int(transformers.__version__.split(".")[0]) < 5 else \
        GPT2LMHeadModel.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise SystemExit("reloading %s: %s" % (out, bad))
    m2 = m2.to(dev).eval()
    if not torch.equal(m2.lm_head.weight, m2.transformer.wte.weight):
        raise SystemExit("reloaded lm_head is not tied to wte")
    reload_val = evaluate(m2)
    log("reloaded with GPT2LMHeadModel.from_pretrained (no missing or unexpected weights) and "
        "tokenizers.Tokenizer.from_file: validation loss %.4f (%s weights; trained model %.4f)" % (
            reload_val, a.dtype.upper(), final_val))
    if abs(reload_val - final_val) > 0.05:
        raise SystemExit("reloaded model's loss %.4f is far from %.4f" % (reload_val, final_val))

    g = torch.Generator(device="cpu")
    g.manual_seed(a.seed)

    @torch.no_grad()
    def generate(prompt, n, greedy):
        ids = [eos_id] + tok2.encode(prompt).ids
        for _ in range(n):
            logits = m2(input_ids=torch.tensor([ids[-T:]], device=dev)).logits[0, -1].float().cpu()
            if greedy:
                nxt = int(logits.argmax())
            else:
                v, i = torch.topk(logits / 0.8, 40)
                nxt = int(i[torch.multinomial(torch.softmax(v, -1), 1, generator=g)])
            if nxt == eos_id:
                break
            ids.append(nxt)
        return tok2.decode(ids[1:])

    log("samples (from the saved checkpoint; prompt, then continuation):")
    for prompt, greedy in (("In the beginning", True), ("And the LORD said unto Moses,", False),
                           ("Blessed are the", False), ("The king of Babylon", False)):
        log("  [%s] %s" % ("greedy" if greedy else "top-k 40, T 0.8", generate(prompt, a.sample_tokens, greedy)))
    wall = time.time() - T_START
    log("wall time: %.1f s in all (training %.1f s)" % (wall, train_s))
    log.write(os.path.join(out, "train_log.txt"))
    names = sorted(f for f in os.listdir(out) if os.path.isfile(os.path.join(out, f)))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in names)
    log("size: %.1f MB on disk, model.safetensors %.1f MB (%s)" % (
        size / 1e6, os.path.getsize(os.path.join(out, "model.safetensors")) / 1e6, ", ".join(names)))
    log.write(os.path.join(out, "train_log.txt"))
    if size > a.max_size_mb * 1e6:
        raise SystemExit("%s is %.1f MB, over the %.0f MB cap" % (out, size / 1e6, a.max_size_mb))


if __name__ == "__main__":
    main()
