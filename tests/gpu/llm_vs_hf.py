#!/usr/bin/env python3
"""kiln's LLM forward against Hugging Face transformers, on the GPU (scripts/gpu-run's llm stage).

Tiny random models are made here with transformers (no network): GPT-2 (2 layers, n_embd 256, 4 heads:
head_dim 64), GPT-2 with n_embd 64 (head_dim 16), Llama (hidden 256, 4 heads / 2 kv heads, head_dim 64,
rope theta 10000), the same Llama with llama3 rope scaling, Llama with 12 heads of 80 over one kv
head (gqa12-hd80), and the other families of the Llama's size (Mistral with a sliding window of 24,
shorter than its contexts,
Qwen2 with q/k/v biases, Phi-3 with half-rotary heads, Gemma with 2 heads of 256 over one kv head);
each saved with save_pretrained in fp16 and in bf16 (safetensors), next to a
byte-level BPE tokenizer.json trained here with `tokenizers`.

For every model and dtype:
  logits  llm_driver --target cuda --dtype f16|bf16 (tests/unit/llm_driver.c through llm_runner.h) on two
          prompts fed together in steps of 16 tokens, then 1 (prefill, then decode through the paged KV
          cache), against transformers in fp32 on the same (rounded) weights; transformers' own run in
          the file's dtype is shown next to it. err = max|kiln - hf32| / max|hf32|. Passes when
          err <= TOL (fp16 2e-2, bf16 5e-2), or err <= 2 x transformers' own error in that dtype.
  greedy  kiln generate DIR (fp16; bf16: an engine from kiln build --hf --bf16; both stream to the GPU
          in their own precision) --temperature 0
          --max-tokens 64 --print-ids --target cuda, against a greedy loop of transformers in fp32 on
          kiln's prompt ids (kiln's prompt ids must also equal `tokenizers`'). Passes when identical;
          at a first divergence, only when transformers' top-2 gap there is a near-tie:
          gap <= TOL x max|logit| of that step (the logits tolerance, in logit units), or when
          transformers' own greedy run in that dtype leaves the fp32 one no later (kiln agrees with
          the reference for at least as many tokens as transformers-in-dtype does).
Prints a table; exit 1 on a real mismatch, 77 when the GPU (or torch) is missing.

usage: llm_vs_hf.py [--driver BIN] [--kiln BIN] [--device cuda|cpu] [--target cuda|cpu] [--tokens 64]
                    [--models gpt2,gpt2-hd16,llama,llama3,gqa12-hd80,mistral,qwen2,phi3,gemma] [--workdir DIR]
--device cpu --target cpu runs the whole thing here (kiln's CPU forward is fp32: a plumbing check).
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

TOL = {"f16": 2e-2, "bf16": 5e-2}
TEXT = (
    "In the beginning was the compiler, and the compiler was with the graph, and the graph was good. "
    "The kernels ran on the device and the tensors flowed from layer to layer, each one a little warmer "
    "than the last. Then the cat sat on the mat and the dog lay by the door, and the rain fell on the "
    "roof of the house where the engineers slept. They dreamed of faster attention, of paged caches and "
    "of tokens that came one after another until the end of the sequence. And in the morning they woke "
    "and wrote the tests, and the tests were green, and they went out into the garden to see the sun."
)
PROMPT = "the cat sat on the mat and then"
SEQ_A, SEQ_B = 40, 29


def find_bin(explicit, env, candidates):
    for p in [explicit, os.environ.get(env)] + candidates:
        if p and os.access(p, os.X_OK):
            return os.path.abspath(p)
    return None


def train_tokenizer(d, tokenizers):
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator([TEXT] * 4, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    tok.save(os.path.join(d, "tokenizer.json"))
    return tok.get_vocab_size(), tok.token_to_id("<|endoftext|>")


def family_model(name, vocab, eos, transformers):
    """The tiny random Mistral, Qwen2, Phi-3 or Gemma (None for another name)."""
    common = dict(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0,
                  bos_token_id=eos, eos_token_id=eos)
    if name == "mistral":  # a window shorter than the prompts and generations: the attention windows
        return transformers.MistralForCausalLM(transformers.MistralConfig(**common, head_dim=64, sliding_window=24,
                                                                          tie_word_embeddings=False))
    if name == "qwen2":  # q/k/v biases
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, tie_word_embeddings=True))
    if name == "phi3":  # fused qkv_proj / gate_up_proj, RoPE on half of each head
        return transformers.Phi3ForCausalLM(transformers.Phi3Config(**common, partial_rotary_factor=0.5,
                                                                    pad_token_id=eos, tie_word_embeddings=False))
    if name == "gemma":  # head dim 256, GeGLU, scaled embeddings, 1 + w norms
        return transformers.GemmaForCausalLM(transformers.GemmaConfig(
            **dict(common, num_attention_heads=2, num_key_value_heads=1), head_dim=256,
            hidden_act="gelu_pytorch_tanh", pad_token_id=eos))
    return None


def make_model(name, vocab, eos, transformers, torch):
    model = family_model(name, vocab, eos, transformers)
    if model is not None:
        pass
    elif name.startswith("gpt2"):
        cfg = transformers.GPT2Config(vocab_size=vocab, n_layer=2, n_embd=64 if name == "gpt2-hd16" else 256,
                                      n_head=4, n_positions=256,
                                      bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=True)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        rope = None
        if name == "llama3":
            rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32}
        # gqa12-hd80: head_dim apart from hidden / heads (transformers 5 wants hidden a multiple of heads)
        hidden, heads, kv_heads, head_dim = (240, 12, 1, 80) if name == "gqa12-hd80" else (256, 4, 2, 64)
        cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=512, num_hidden_layers=2,
                                       num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                                       max_position_embeddings=256, rope_theta=10000.0, rope_scaling=rope,
                                       bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    # weights of a useful scale (the default init gives near-zero logits): norms near 1, the rest N(0, 0.15)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm = ("ln" in pname or "norm" in pname) and pname.endswith("weight")
            center = 0.0 if name == "gemma" else 1.0  # Gemma's RMSNorm scales by 1 + w
            p.copy_(center + 0.1 * noise if is_norm else 0.15 * noise)
    return model.eval()


def hf_from_dir(transformers, d, torch_dtype, device):
    cls = transformers.AutoModelForCausalLM
    try:
        m = cls.from_pretrained(d, dtype=torch_dtype)
    except TypeError:
        m = cls.from_pretrained(d, torch_dtype=torch_dtype)
    return m.to(device).eval()


def hf_logits(torch, model, ids, device):
    with torch.no_grad():
        return model(torch.tensor([ids], device=device)).logits[0].double().cpu().numpy()


def hf_greedy(torch, model, prompt, n, eos, device):
    """Greedy ids of model after prompt (stopping after eos), and each step's (top-2 gap, max|logit|)."""
    ids, steps = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt], device=device), use_cache=True)
        for _ in range(n):
            lg = out.logits[0, -1].double()
            top = torch.topk(lg, 2)
            tok = int(torch.argmax(lg))  # lowest id on ties, as kiln
            steps.append((float(top.values[0] - top.values[1]), float(lg.abs().max())))
            ids.append(tok)
            if tok == eos:
                break
            out = model(torch.tensor([[tok]], device=device), past_key_values=out.past_key_values, use_cache=True)
    return ids, steps


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def run(cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)


def kiln_driver_logits(driver, d, seqs, target, dtype, out):
    cmd = [driver, d] + sum((["--seq", ",".join(map(str, s))] for s in seqs), [])
    cmd += ["--chunks", "16,1", "--block-size", "16", "--scramble", "--target", target, "--dtype", dtype, "--out", out]
    p = run(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"llm_driver failed (exit {p.returncode}): {p.stderr.strip()[-600:]}")
    logits = np.load(out).astype(np.float64)
    rows = np.cumsum([0] + [len(s) for s in seqs])
    return [logits[a:b] for a, b in zip(rows[:-1], rows[1:])]


def kiln_generate(kiln, src, n, target):
    cmd = [kiln, "generate", src, "--prompt", PROMPT, "--temperature", "0", "--max-tokens", str(n), "--print-ids",
           "--target", target]
    p = run(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"kiln generate failed (exit {p.returncode}): {p.stderr.strip()[-600:]}")
    m = re.search(r"\{[^{}]*\"generated_ids\"[^{}]*\}", p.stderr)
    if not m:
        raise RuntimeError(f"no --print-ids JSON in kiln generate's stderr: {p.stderr.strip()[-600:]}")
    j = json.loads(m.group(0))
    return j["prompt_ids"], j["generated_ids"], j.get("finish", "?")


def with_eos(ids, ref, eos):
    """ids with the eos ref ends with appended, when ids are ref without it."""
    return ids + [eos] if ref and ref[-1] == eos and ids == ref[:-1] else ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver")
    ap.add_argument("--kiln")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where transformers runs")
    ap.add_argument("--target", default="cuda", choices=["cuda", "cpu"], help="where kiln runs")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--models", default="gpt2,gpt2-hd16,llama,llama3,gqa12-hd80,mistral,qwen2,phi3,gemma")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--workdir")
    a = ap.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.environ.get("KILN_SOURCE_DIR") or os.getcwd()
    kiln_dir = os.path.dirname(os.environ["KILN_BIN"]) if os.environ.get("KILN_BIN") else None
    driver = find_bin(a.driver, "KILN_LLM_DRIVER", [os.path.join(here, "../bin/llm_driver")]
                      + ([os.path.join(kiln_dir, "llm_driver")] if kiln_dir else [])
                      + [os.path.join(root, p) for p in ("dist/gpu/bin/llm_driver", "build/tests/llm_driver")])
    kiln = find_bin(a.kiln, "KILN_BIN", [os.path.join(here, "../bin/kiln")]
                    + [os.path.join(root, p) for p in ("dist/gpu/bin/kiln", "build/kiln")])
    if not driver or not kiln:
        print(f"llm_vs_hf: llm_driver ({driver}) or kiln ({kiln}) not found", file=sys.stderr)
        return 1
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError as e:
        print(f"llm_vs_hf: SKIP: {e}")
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print("llm_vs_hf: SKIP: torch sees no GPU")
        return 77
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference in fp32
    torch.backends.cudnn.allow_tf32 = False
    dev = a.device
    print(f"llm_vs_hf: kiln {kiln}, driver {driver}, kiln --target {a.target}, transformers "
          f"{transformers.__version__} on {dev}" + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else ""))

    work = a.workdir or tempfile.mkdtemp(prefix="kiln-llm-vs-hf.")
    os.makedirs(work, exist_ok=True)
    t_start = time.time()
    tokdir = os.path.join(work, "tok")
    os.makedirs(tokdir, exist_ok=True)
    vocab, eos = train_tokenizer(tokdir, tokenizers)
    hf_tok = tokenizers.Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    rng = np.random.default_rng(2)
    seqs = [[int(t) for t in rng.integers(0, vocab, n)] for n in (SEQ_A, SEQ_B)]
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}

    rows, bad = [], []
    for name in a.models.split(","):
        base = make_model(name, vocab, eos, transformers, torch)
        for dt in a.dtypes.split(","):
            tag = f"{name}/{dt}"
            row = {"case": tag}
            try:
                d = os.path.join(work, f"{name}_{dt}")
                # the reference: the weights rounded to dt, run in fp32 (a copy is converted and saved:
                # converting the model itself would round its RoPE frequencies too)
                ref = copy.deepcopy(base)
                with torch.no_grad():
                    for p in ref.parameters():
                        p.copy_(p.to(tdt[dt]).to(torch.float32))
                copy.deepcopy(ref).to(tdt[dt]).save_pretrained(d)
                shutil.copy(os.path.join(tokdir, "tokenizer.json"), d)
                ref = ref.to(dev)
                half = hf_from_dir(transformers, d, tdt[dt], dev)
            except (RuntimeError, OSError, ValueError) as e:
                row.update(logits="ERROR", greedy="ERROR")
                bad.append(f"{tag}: making the model: {e}")
                rows.append(row)
                continue
            try:
                got = kiln_driver_logits(driver, d, seqs, a.target, dt, os.path.join(work, f"{name}_{dt}.npy"))
                err = hf_err = 0.0
                for s, g in zip(seqs, got):
                    want = hf_logits(torch, ref, s, dev)
                    err = max(err, rel_err(g, want))
                    hf_err = max(hf_err, rel_err(hf_logits(torch, half, s, dev), want))
                ok_logits = np.isfinite(err) and (err <= TOL[dt] or err <= 2 * hf_err)
                row.update(err=err, hf_err=hf_err, logits="ok" if ok_logits else "FAIL")
                if not ok_logits:
                    bad.append(f"{tag}: logits error {err:.2e} > {TOL[dt]:.0e} (transformers {dt}: {hf_err:.2e})")
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                row["logits"] = "ERROR"
                bad.append(f"{tag}: {e}")
            try:
                src = d
                if dt == "bf16":  # the fp16 directory runs as it is; bf16 through a bf16 engine (kiln build --hf)
                    src = os.path.join(work, f"{name}_{dt}.kiln")
                    p = run([kiln, "build", "--hf", d, "-o", src, "--bf16"])
                    if p.returncode != 0:
                        raise RuntimeError(f"kiln build --hf --bf16 failed: {p.stderr.strip()[-600:]}")
                prompt_ids, gen, finish = kiln_generate(kiln, src, a.tokens, a.target)
                if prompt_ids != hf_tok.encode(PROMPT).ids:
                    bad.append(f"{tag}: kiln's prompt ids {prompt_ids} != tokenizers' {hf_tok.encode(PROMPT).ids}")
                want, steps = hf_greedy(torch, ref, prompt_ids, a.tokens, eos, dev)
                want_half, _ = hf_greedy(torch, half, prompt_ids, a.tokens, eos, dev)
                # kiln's ids may leave out the eos it stopped at; the reference's end with it
                g2, w2, h2 = with_eos(gen, want, eos), want, want_half
                same = next((i for i, (x, y) in enumerate(zip(g2, w2)) if x != y), min(len(g2), len(w2)))
                hf_same = next((i for i, (x, y) in enumerate(zip(h2, w2)) if x != y), min(len(h2), len(w2)))
                row.update(n=len(gen), agree=same, hf_agree=hf_same, finish=finish)
                if same == len(g2) == len(w2):
                    row["greedy"] = "identical"
                elif same < len(w2):  # (also where kiln stopped early: an eos it left out)
                    gap, scale = steps[same]
                    row["gap"] = gap
                    if gap <= TOL[dt] * scale:
                        row["greedy"] = f"near-tie at {same}"
                    elif same >= hf_same:
                        row["greedy"] = f"differs at {same} (transformers-{dt} at {hf_same})"
                    else:
                        row["greedy"] = f"FAIL at {same}"
                        bad.append(f"{tag}: greedy differs at token {same} (kiln {g2[same]}, transformers {w2[same]}),"
                                   f" top-2 gap {gap:.3g} > {TOL[dt]:.0e} x {scale:.3g}")
                else:
                    row["greedy"] = f"FAIL: length {len(g2)} vs {len(w2)}"
                    bad.append(f"{tag}: kiln generated {len(gen)} token(s) ({finish}), transformers {len(want)}")
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                row["greedy"] = "ERROR"
                bad.append(f"{tag}: {e}")
            rows.append(row)
            print(f"  {tag}: {row}", flush=True)

    print(f"\nkiln LLM vs transformers (kiln --target {a.target}, transformers on {dev}; reference: transformers "
          f"fp32 on the rounded weights; tolerances {TOL}; {a.tokens} greedy tokens)")
    print("| model/dtype | kiln err | transformers-dtype err | logits | greedy tokens equal | transformers-dtype"
          " equal | top-2 gap at divergence | greedy |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        fmt = lambda k: f"{r[k]:.2e}" if k in r else "-"
        eq = f"{r['agree']}/{r['n']}" if "agree" in r else "-"
        heq = f"{r['hf_agree']}" if "hf_agree" in r else "-"
        gap = f"{r['gap']:.3g}" if "gap" in r else "-"
        print(f"| {r['case']} | {fmt('err')} | {fmt('hf_err')} | {r.get('logits', '-')} | {eq} | {heq} | {gap} |"
              f" {r.get('greedy', '-')} |")
    print(f"({time.time() - t_start:.1f} s)")
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    if bad:
        print("\nFAIL:\n  " + "\n  ".join(bad))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
