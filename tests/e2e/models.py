"""Builders for the end-to-end test models: a ResNet-style CNN, a BERT-style encoder and a GPT-2-style
decoder, written node by node with onnx.helper the way PyTorch's TorchScript exporter emits them at
opset 17 (weights as initializers, small scalars and shape pieces as Constant nodes, node names like
"/encoder/layer.0/attention/self/MatMul", reshape targets computed with Shape/Gather/Concat).

Weights are random (numpy, fixed seeds) and scaled so activations stay O(1); every builder takes its
sizes as arguments so bench/ can build larger versions of the same graphs. make_inputs() gives
deterministic inputs for a model at a (batch, seq) shape.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what the TorchScript exporter writes for opset 17
FLOAT_MIN = float(np.finfo(np.float32).min)


def torch_scope(module_path):
    """The exporter's node scope for a module path: "encoder.layer.0.attention" ->
    "/encoder/layer.0/attention" (a numeric component stays joined to the one before it)."""
    parts = []
    for p in module_path.split("."):
        if p.isdigit() and parts:
            parts[-1] += f".{p}"
        else:
            parts.append(p)
    return "/" + "/".join(parts)


class GraphBuilder:
    """Accumulates nodes and initializers; names values "<node name>_output_<i>" like the exporter.
    Node names are made unique by appending _1, _2, ... as the exporter does."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.initializers = []
        self._used = {}

    def _unique(self, name):
        count = self._used.get(name, 0)
        self._used[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def op(self, op_type, inputs, name, n_out=1, domain="", **attrs):
        """Adds one node; returns its output name (n_out == 1) or the list of output names."""
        name = self._unique(name)
        outputs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs[0] if n_out == 1 else outputs

    def const(self, scope, value, dtype=np.float32):
        """A Constant node holding value (a scalar stays rank 0); returns its output name."""
        arr = np.array(value, dtype=dtype)
        return self.op("Constant", [], f"{scope}/Constant", value=numpy_helper.from_array(arr))

    def init(self, name, array):
        """An initializer named name holding array (as float32 unless it already has an int/bool dtype)."""
        arr = np.asarray(array)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def weight(self, name, shape, fan_in):
        """A random initializer ~ N(0, 1/fan_in)."""
        return self.init(name, self.rng.normal(0.0, 1.0 / np.sqrt(fan_in), size=shape))

    def small(self, name, shape, scale=0.1):
        """A random initializer ~ N(0, scale^2) (biases, LayerNorm beta)."""
        return self.init(name, self.rng.normal(0.0, scale, size=shape))

    def near_one(self, name, shape):
        """A random initializer ~ 1 + N(0, 0.1^2) (LayerNorm gamma, BatchNorm scale)."""
        return self.init(name, 1.0 + self.rng.normal(0.0, 0.1, size=shape))

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.initializers)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="pytorch", producer_version="2.1.0")
        m.ir_version = IR_VERSION
        return m

    # ---- pieces shared by the transformer builders ----

    def shape_dim(self, scope, x, axis):
        """Gather(Shape(x), axis) -> an int64 scalar, as the exporter writes x.size(axis)."""
        shape = self.op("Shape", [x], f"{scope}/Shape")
        return self.op("Gather", [shape, self.const(scope, axis, np.int64)], f"{scope}/Gather", axis=0)

    def unsqueeze(self, scope, x, axes):
        return self.op("Unsqueeze", [x, self.const(scope, axes, np.int64)], f"{scope}/Unsqueeze")

    def linear(self, scope, x, fan_in, fan_out):
        """x @ W + b as MatMul then Add (nn.Linear on a rank-3 input)."""
        w = self.weight(f"{scope}.weight_t", [fan_in, fan_out], fan_in)
        b = self.small(f"{scope}.bias", [fan_out])
        y = self.op("MatMul", [x, w], f"{torch_scope(scope)}/MatMul")
        return self.op("Add", [b, y], f"{torch_scope(scope)}/Add")

    def layer_norm(self, scope, x, hidden, decomposed, eps=1e-5):
        """LayerNorm over the last axis: the LayerNormalization op, or the ReduceMean/Sub/Pow/
        ReduceMean/Add/Sqrt/Div/Mul/Add chain older exports produce."""
        gamma = self.near_one(f"{scope}.weight", [hidden])
        beta = self.small(f"{scope}.bias", [hidden])
        s = torch_scope(scope)
        if not decomposed:
            return self.op("LayerNormalization", [x, gamma, beta], f"{s}/LayerNormalization",
                           axis=-1, epsilon=eps)
        mean = self.op("ReduceMean", [x], f"{s}/ReduceMean", axes=[-1], keepdims=1)
        centered = self.op("Sub", [x, mean], f"{s}/Sub")
        sq = self.op("Pow", [centered, self.const(s, 2.0)], f"{s}/Pow")
        var = self.op("ReduceMean", [sq], f"{s}/ReduceMean", axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(s, eps)], f"{s}/Add")], f"{s}/Sqrt")
        normed = self.op("Div", [centered, std], f"{s}/Div")
        return self.op("Add", [self.op("Mul", [normed, gamma], f"{s}/Mul"), beta], f"{s}/Add")

    def split_heads(self, scope, x, heads, head_dim, perm):
        """[b, s, heads*head_dim] -> Reshape [b, s, heads, head_dim] (target from Shape/Gather/Concat)
        -> Transpose(perm)."""
        b = self.unsqueeze(scope, self.shape_dim(scope, x, 0), [0])
        s = self.unsqueeze(scope, self.shape_dim(scope, x, 1), [0])
        target = self.op("Concat", [b, s, self.const(scope, [heads], np.int64),
                                    self.const(scope, [head_dim], np.int64)], f"{scope}/Concat", axis=0)
        r = self.op("Reshape", [x, target], f"{scope}/Reshape")
        return self.op("Transpose", [r], f"{scope}/Transpose", perm=perm)

    def merge_heads(self, scope, ctx, like, hidden):
        """[b, heads, s, head_dim] -> Transpose -> Reshape [b, s, hidden], the target's b and s taken
        from the shape of `like` ([b, s, ...])."""
        t = self.op("Transpose", [ctx], f"{scope}/Transpose", perm=[0, 2, 1, 3])
        b = self.unsqueeze(scope, self.shape_dim(scope, like, 0), [0])
        s = self.unsqueeze(scope, self.shape_dim(scope, like, 1), [0])
        target = self.op("Concat", [b, s, self.const(scope, [hidden], np.int64)], f"{scope}/Concat", axis=0)
        return self.op("Reshape", [t, target], f"{scope}/Reshape")


# ------------------------------------------------------------------------------------------ ResNet

def build_resnet(widths=(16, 32), image=32, num_classes=10, seed=0):
    """A small ResNet: stem Conv(3x3, bias)+BN+Relu, MaxPool(3, s2), then one BasicBlock per width
    (the first keeps the stem width with an identity shortcut; each later one halves the resolution
    with a stride-2 conv and a 1x1 stride-2 conv+BN shortcut), GlobalAveragePool, Flatten, Gemm.
    Input "input" [batch, 3, image, image] (batch symbolic), output "output" [batch, num_classes]."""
    g = GraphBuilder(seed)

    def conv_bn(scope, x, cin, cout, k, stride, relu, bias=False):
        w = g.weight(f"{scope}.conv.weight", [cout, cin, k, k], cin * k * k)
        ins = [x, w] + ([g.small(f"{scope}.conv.bias", [cout])] if bias else [])
        p = k // 2
        y = g.op("Conv", ins, f"{torch_scope(scope)}/conv/Conv", dilations=[1, 1], group=1, kernel_shape=[k, k],
                 pads=[p, p, p, p], strides=[stride, stride])
        bn = [g.near_one(f"{scope}.bn.weight", [cout]), g.small(f"{scope}.bn.bias", [cout]),
              g.small(f"{scope}.bn.running_mean", [cout]),
              g.init(f"{scope}.bn.running_var", g.rng.uniform(0.5, 1.5, size=[cout]))]
        y = g.op("BatchNormalization", [y] + bn, f"{torch_scope(scope)}/bn/BatchNormalization", epsilon=1e-5,
                 momentum=0.9)
        return g.op("Relu", [y], f"{torch_scope(scope)}/relu/Relu") if relu else y

    x = conv_bn("stem", "input", 3, widths[0], 3, 1, relu=True, bias=True)
    x = g.op("MaxPool", [x], "/maxpool/MaxPool", ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], strides=[2, 2])
    cin = widths[0]
    for i, cout in enumerate(widths):
        s = f"layer{i + 1}.0"
        stride = 1 if i == 0 else 2
        y = conv_bn(f"{s}.a", x, cin, cout, 3, stride, relu=True)
        y = conv_bn(f"{s}.b", y, cout, cout, 3, 1, relu=False)
        shortcut = x if (stride == 1 and cin == cout) else conv_bn(f"{s}.down", x, cin, cout, 1, stride,
                                                                   relu=False)
        x = g.op("Relu", [g.op("Add", [y, shortcut], f"{torch_scope(s)}/Add")], f"{torch_scope(s)}/relu/Relu")
        cin = cout
    x = g.op("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = g.op("Flatten", [x], "/Flatten", axis=1)
    w = g.weight("fc.weight", [num_classes, cin], cin)
    b = g.small("fc.bias", [num_classes])
    g.nodes.append(helper.make_node("Gemm", [x, w, b], ["output"], name="/fc/Gemm", alpha=1.0, beta=1.0,
                                    transB=1))
    return g.model("resnet_style",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, image, image])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", num_classes])])


# ------------------------------------------------------------------------------------------ BERT

def build_bert(hidden=64, heads=4, layers=2, intermediate=None, vocab=100, max_pos=64, type_vocab=2, seed=1):
    """A BERT encoder. Inputs input_ids, attention_mask, token_type_ids: int64 [batch, seq].
    Embeddings: Gather(word) + Gather(token type) + Gather(position, Slice of a position_ids buffer
    up to seq), LayerNormalization. The padding mask is (1 - Cast(Unsqueeze(Unsqueeze(mask)))) *
    -10000, added to the scaled scores. Even layers use the LayerNormalization op, odd layers the
    decomposed form. FFN with Erf-form GELU. Outputs last_hidden_state [batch, seq, hidden] and
    pooler_output [batch, hidden] (Gather of token 0, Gemm, Tanh)."""
    intermediate = intermediate or 4 * hidden
    head_dim = hidden // heads
    g = GraphBuilder(seed)

    word = g.init("embeddings.word_embeddings.weight", g.rng.normal(0, 0.5, size=[vocab, hidden]))
    ttype = g.init("embeddings.token_type_embeddings.weight", g.rng.normal(0, 0.5, size=[type_vocab, hidden]))
    pos = g.init("embeddings.position_embeddings.weight", g.rng.normal(0, 0.5, size=[max_pos, hidden]))
    pos_ids = g.init("embeddings.position_ids", np.arange(max_pos, dtype=np.int64)[None, :])

    sc = "/embeddings"
    seq = g.unsqueeze(sc, g.shape_dim(sc, "input_ids", 1), [0])
    pos_slice = g.op("Slice", [pos_ids, g.const(sc, [0], np.int64), seq, g.const(sc, [1], np.int64),
                               g.const(sc, [1], np.int64)], f"{sc}/Slice")
    e = g.op("Gather", [word, "input_ids"], f"{sc}/word_embeddings/Gather")
    e = g.op("Add", [e, g.op("Gather", [ttype, "token_type_ids"], f"{sc}/token_type_embeddings/Gather")],
             f"{sc}/Add")
    e = g.op("Add", [e, g.op("Gather", [pos, pos_slice], f"{sc}/position_embeddings/Gather")], f"{sc}/Add")
    x = g.layer_norm("embeddings.LayerNorm", e, hidden, decomposed=False, eps=1e-12)

    m = g.unsqueeze("", g.unsqueeze("", "attention_mask", [1]), [2])
    m = g.op("Cast", [m], "/Cast", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const("", 1.0), m], "/Sub")
    mask = g.op("Mul", [m, g.const("", -10000.0)], "/Mul")

    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        s = f"{torch_scope(p)}/attention/self"
        decomposed = layer % 2 == 1
        q = g.split_heads(s, g.linear(f"{p}.attention.self.query", x, hidden, hidden), heads, head_dim,
                          [0, 2, 1, 3])
        k = g.split_heads(s, g.linear(f"{p}.attention.self.key", x, hidden, hidden), heads, head_dim,
                          [0, 2, 3, 1])
        v = g.split_heads(s, g.linear(f"{p}.attention.self.value", x, hidden, hidden), heads, head_dim,
                          [0, 2, 1, 3])
        scores = g.op("MatMul", [q, k], f"{s}/MatMul")
        scores = g.op("Div", [scores, g.const(s, float(np.sqrt(head_dim)))], f"{s}/Div")
        scores = g.op("Add", [scores, mask], f"{s}/Add")
        probs = g.op("Softmax", [scores], f"{s}/Softmax", axis=-1)
        ctx = g.merge_heads(s, g.op("MatMul", [probs, v], f"{s}/MatMul"), x, hidden)
        attn = g.linear(f"{p}.attention.output.dense", ctx, hidden, hidden)
        attn = g.op("Add", [attn, x], f"{torch_scope(p)}/attention/output/Add")
        x = g.layer_norm(f"{p}.attention.output.LayerNorm", attn, hidden, decomposed, eps=1e-12)

        h = g.linear(f"{p}.intermediate.dense", x, hidden, intermediate)
        gs = f"{torch_scope(p)}/intermediate/intermediate_act_fn"
        erf = g.op("Erf", [g.op("Div", [h, g.const(gs, 1.4142135381698608)], f"{gs}/Div")], f"{gs}/Erf")
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, g.const(gs, 1.0)], f"{gs}/Add")], f"{gs}/Mul"),
                         g.const(gs, 0.5)], f"{gs}/Mul")
        out = g.linear(f"{p}.output.dense", h, intermediate, hidden)
        out = g.op("Add", [out, x], f"{torch_scope(p)}/output/Add")
        x = g.layer_norm(f"{p}.output.LayerNorm", out, hidden, decomposed, eps=1e-12)

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity"))
    first = g.op("Gather", [x, g.const("/pooler", 0, np.int64)], "/pooler/Gather", axis=1)
    pw = g.weight("pooler.dense.weight", [hidden, hidden], hidden)
    pb = g.small("pooler.dense.bias", [hidden])
    pooled = g.op("Gemm", [first, pw, pb], "/pooler/dense/Gemm", alpha=1.0, beta=1.0, transB=1)
    g.nodes.append(helper.make_node("Tanh", [pooled], ["pooler_output"], name="/pooler/activation/Tanh"))

    ids = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])  # noqa: E731
    return g.model("bert_style", [ids("input_ids"), ids("attention_mask"), ids("token_type_ids")],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                                  ["batch", "sequence", hidden]),
                    helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])])


# ------------------------------------------------------------------------------------------ GPT-2

def build_gpt2(hidden=64, heads=4, layers=2, vocab=100, max_pos=64, seed=2):
    """A GPT-2 decoder stack. Input input_ids int64 [batch, seq]; output logits [batch, seq, vocab].
    Position ids are Unsqueeze(Range(0, Gather(Shape(input_ids), 1), 1)). Pre-LN blocks with a fused
    QKV MatMul split three ways (Split with a split input). Even layers mask with Where on a Slice of
    a constant lower-triangular bool buffer (like GPT-2's `bias` buffer) and float32 min; odd layers
    add (1 - Trilu(ConstantOfShape([s, s], 1))) * float32 min. MLP with Tanh-form GELU. Final
    LayerNormalization and an LM head MatMul with the (tied) token embedding transposed."""
    head_dim = hidden // heads
    g = GraphBuilder(seed)
    wte_arr = g.rng.normal(0, 0.5, size=[vocab, hidden]).astype(np.float32)
    wte = g.init("transformer.wte.weight", wte_arr)
    wpe = g.init("transformer.wpe.weight", g.rng.normal(0, 0.5, size=[max_pos, hidden]))
    causal = np.tril(np.ones([max_pos, max_pos], dtype=bool))[None, None]

    sc = "/transformer"
    seq = g.shape_dim(sc, "input_ids", 1)
    pos_ids = g.op("Range", [g.const(sc, 0, np.int64), seq, g.const(sc, 1, np.int64)], f"{sc}/Range")
    pos_ids = g.unsqueeze(sc, pos_ids, [0])
    x = g.op("Gather", [wte, "input_ids"], f"{sc}/wte/Gather")
    x = g.op("Add", [x, g.op("Gather", [wpe, pos_ids], f"{sc}/wpe/Gather")], f"{sc}/Add")

    for layer in range(layers):
        p = f"transformer.h.{layer}"
        s = f"{torch_scope(p)}/attn"
        h = g.layer_norm(f"{p}.ln_1", x, hidden, decomposed=False)
        qkv = g.linear(f"{p}.attn.c_attn", h, hidden, 3 * hidden)
        q, k, v = g.op("Split", [qkv, g.const(s, [hidden] * 3, np.int64)], f"{s}/Split", n_out=3, axis=2)
        q = g.split_heads(s, q, heads, head_dim, [0, 2, 1, 3])
        k = g.split_heads(s, k, heads, head_dim, [0, 2, 3, 1])
        v = g.split_heads(s, v, heads, head_dim, [0, 2, 1, 3])
        w = g.op("MatMul", [q, k], f"{s}/MatMul")
        w = g.op("Div", [w, g.const(s, float(np.sqrt(head_dim)))], f"{s}/Div")
        q_len = g.shape_dim(s, q, 2)
        k_len = g.shape_dim(s, v, 2)
        if layer % 2 == 0:
            bias = g.init(f"{p}.attn.bias", causal)
            start = g.unsqueeze(s, g.op("Sub", [k_len, q_len], f"{s}/Sub"), [0])
            end = g.unsqueeze(s, k_len, [0])
            cm = g.op("Slice", [bias, start, end, g.const(s, [2], np.int64), g.const(s, [1], np.int64)],
                      f"{s}/Slice")
            cm = g.op("Slice", [cm, g.const(s, [0], np.int64), end, g.const(s, [3], np.int64),
                                g.const(s, [1], np.int64)], f"{s}/Slice")
            w = g.op("Where", [cm, w, g.const(s, FLOAT_MIN)], f"{s}/Where")
        else:
            dims = g.op("Concat", [g.unsqueeze(s, q_len, [0]), g.unsqueeze(s, k_len, [0])], f"{s}/Concat",
                        axis=0)
            ones = g.op("ConstantOfShape", [dims], f"{s}/ConstantOfShape",
                        value=numpy_helper.from_array(np.array([1.0], dtype=np.float32)))
            tril = g.op("Trilu", [ones], f"{s}/Trilu", upper=0)
            add_mask = g.op("Mul", [g.op("Sub", [g.const(s, 1.0), tril], f"{s}/Sub"), g.const(s, FLOAT_MIN)],
                            f"{s}/Mul")
            w = g.op("Add", [w, add_mask], f"{s}/Add")
        probs = g.op("Softmax", [w], f"{s}/Softmax", axis=-1)
        ctx = g.merge_heads(s, g.op("MatMul", [probs, v], f"{s}/MatMul"), h, hidden)
        x = g.op("Add", [g.linear(f"{p}.attn.c_proj", ctx, hidden, hidden), x], f"{torch_scope(p)}/Add")

        h = g.layer_norm(f"{p}.ln_2", x, hidden, decomposed=False)
        h = g.linear(f"{p}.mlp.c_fc", h, hidden, 4 * hidden)
        a = f"{torch_scope(p)}/mlp/act"
        cube = g.op("Pow", [h, g.const(a, 3.0)], f"{a}/Pow")
        inner = g.op("Add", [h, g.op("Mul", [g.const(a, 0.044715), cube], f"{a}/Mul")], f"{a}/Add")
        t = g.op("Tanh", [g.op("Mul", [g.const(a, 0.7978845608028654), inner], f"{a}/Mul")], f"{a}/Tanh")
        h = g.op("Mul", [g.op("Mul", [g.const(a, 0.5), h], f"{a}/Mul"),
                         g.op("Add", [g.const(a, 1.0), t], f"{a}/Add")], f"{a}/Mul")
        x = g.op("Add", [x, g.linear(f"{p}.mlp.c_proj", h, 4 * hidden, hidden)], f"{torch_scope(p)}/Add")

    x = g.layer_norm("transformer.ln_f", x, hidden, decomposed=False)
    head = g.init("lm_head.weight_t", np.ascontiguousarray(wte_arr.T))
    g.nodes.append(helper.make_node("MatMul", [x, head], ["logits"], name="/lm_head/MatMul"))
    return g.model("gpt2_style",
                   [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", vocab])])


# ------------------------------------------------------------------------------------------ inputs

BUILDERS = {"resnet": build_resnet, "bert": build_bert, "gpt2": build_gpt2}


def make_inputs(kind, batch, seq=None, seed=0, vocab=100, image=32):
    """Deterministic inputs for a model of the given kind ("resnet": image batch; "bert": ids, a padding
    mask whose row i masks its last 3*i tokens (at least one token stays), token types 0 then 1;
    "gpt2": ids). vocab/image must match the sizes the model was built with."""
    rng = np.random.default_rng(1000 + seed)
    if kind == "resnet":
        return {"input": rng.standard_normal([batch, 3, image, image]).astype(np.float32)}
    ids = rng.integers(0, vocab, size=[batch, seq], dtype=np.int64)
    if kind == "gpt2":
        return {"input_ids": ids}
    mask = np.ones([batch, seq], dtype=np.int64)
    for i in range(batch):
        mask[i, max(1, seq - 3 * i):] = 0
    types = np.zeros([batch, seq], dtype=np.int64)
    types[:, seq // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
