"""Exports small, randomly initialized torchvision and Hugging Face models with PyTorch's two ONNX
exporters (TorchScript-based and dynamo-based, each at its default opset) into tests/data/torch/,
the way a user would. test_torch_exports.py then runs them through kiln and onnxruntime.

Needs torch, torchvision and transformers (not part of the test venv); the exported files are
committed so the tests do not. usage: export_torch_models.py [OUTDIR]

The TorchScript exporter cannot export transformers' GPT-2 and Llama (it fails on aten::diff), so
those two exist in dynamo form only; the manifest records every export's outcome.
"""
import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torchvision
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

warnings.simplefilter("ignore")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "torch")


class Logits(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


class Encoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def trained_like(model):
    """torchvision's fresh initialisation (BatchNorm as identity, classifier weights ~0.01) gives logits
    around 1e-7, below float16's range; give BatchNorm and the classifier values like a trained
    network's so every precision sees realistic magnitudes."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
    return model


def image_model(make):
    x = torch.randn(2, 3, 64, 64)
    return lambda: trained_like(make()), (x,), ["image"], ["logits"], {"image": {0: "batch"}}


def text_model(make, with_mask):
    ids = torch.randint(0, 100, (2, 16))
    if with_mask:
        mask = torch.ones(2, 16, dtype=torch.int64)
        mask[1, 12:] = 0
        return make, (ids, mask), ["input_ids", "attention_mask"], ["hidden"], \
            {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return make, (ids,), ["input_ids"], ["logits"], {"input_ids": {0: "batch", 1: "seq"}}


MODELS = {
    "mobilenet_v2": image_model(lambda: torchvision.models.mobilenet_v2(width_mult=0.25, num_classes=10)),
    "mobilenet_v3": image_model(lambda: torchvision.models.mobilenet_v3_small(width_mult=0.25, num_classes=10)),
    "bert": text_model(lambda: Encoder(BertModel(BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100,
        max_position_embeddings=64, attn_implementation="eager"))), True),
    "gpt2": text_model(lambda: Logits(GPT2LMHeadModel(GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64, attn_implementation="eager"))), False),
    "llama": text_model(lambda: Logits(LlamaForCausalLM(LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=100, max_position_embeddings=64, attn_implementation="eager"))), False),
}


def export(name, exporter, spec):
    make, args, inames, onames, dyn = spec
    torch.manual_seed(0)
    model = make().eval()
    path = os.path.join(OUT, f"{name}_{exporter}.onnx")
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, input_names=inames, output_names=onames, dynamic_axes=dyn, dynamo=False)
        else:
            shapes = tuple({a: torch.export.Dim.AUTO for a in dyn[n]} for n in inames)
            torch.onnx.export(model, args, path, input_names=inames, output_names=onames, dynamo=True,
                              dynamic_shapes=shapes, external_data=True)
    return os.path.basename(path)


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {}
    for name, spec in MODELS.items():
        for exporter in ("torchscript", "dynamo"):
            key = f"{name}_{exporter}"
            try:
                manifest[key] = {"file": export(name, exporter, spec), "inputs": spec[2]}
                print("exported", key, flush=True)
            except Exception as e:  # noqa: BLE001 - recorded in the manifest
                manifest[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                print("failed", key, manifest[key]["error"], flush=True)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "models": manifest}, f, indent=1)


if __name__ == "__main__":
    main()
