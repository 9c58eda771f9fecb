"""Export the torchvision classifiers of the CPU benchmark (SqueezeNet 1.1, ShuffleNetV2 x0.5,
MobileNetV3-Small, ResNet-18, EfficientNet-B0) to ONNX skeletons: the exported graph (eval mode,
torch's own constant folding, opset 17, dynamic batch) with every initializer of 64 or more elements
emptied and described in a sidecar JSON (dims, mean, std), so the files stay small enough to keep in
the repository. bench_cpu.py refills the weights with seeded normal values of the same statistics.
Needs torch and torchvision (random initialization, no download).

usage: export_torchvision.py OUTDIR [names...]"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torchvision

MODELS = {
    "squeezenet1_1": lambda: torchvision.models.squeezenet1_1(),
    "shufflenet_v2_x0_5": lambda: torchvision.models.shufflenet_v2_x0_5(),
    "mobilenet_v3_small": lambda: torchvision.models.mobilenet_v3_small(),
    "resnet18": lambda: torchvision.models.resnet18(),
    "efficientnet_b0": lambda: torchvision.models.efficientnet_b0(),
}


def skeleton(path):
    """Empties the large initializers of the model at path in place; returns their descriptions."""
    model = onnx.load(path)
    stats = {}
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.size < 64 or arr.dtype != np.float32:
            continue
        stats[init.name] = {"dims": list(arr.shape), "mean": float(arr.mean()), "std": float(arr.std())}
        init.ClearField("raw_data")
        init.ClearField("float_data")
    onnx.save(model, path)
    return stats


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name in sys.argv[2:] or MODELS:
        path = os.path.join(out, name + ".onnx")
        with torch.no_grad():
            torch.onnx.export(MODELS[name]().eval(), (torch.randn(1, 3, 224, 224),), path, input_names=["image"],
                              output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                              opset_version=17, dynamo=False)
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(skeleton(path), f)
        print(f"exported {name}: {os.path.getsize(path)} bytes", flush=True)


if __name__ == "__main__":
    main()
