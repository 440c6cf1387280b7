"""FlexAttention for the encodings that form their own logits (OwnLogits.flex_form: FoX, Shaw without relative
values, DeBERTa, Transformer-XL): the flex form equals the encoding's own attention, eagerly and compiled, with
windows, sinks and documents; a compiled function serves a second length without compiling again (ALiBi's here);
each form's bias passes inductor's check before FlexAttention's backward. The gradients themselves need CUDA
(FlexAttention has no backward on this CPU): benchmarks/gpu_check.py compares them there, unmeasured so far."""
import types
import warnings

import pytest
import torch

import positional
from attention import flex as flex_mod
from attention.flex import Flex
from attention.plan import AttentionPlan, choose_kernel
from tests.conftest import tiny_gpt
from tests.test_perf import on_cuda

WITH_A_FORM = {"shaw": {"shaw_values": False}}   # settings under which an encoding has its flex form
FORMED = [(n, WITH_A_FORM.get(n, {})) for n, cls in positional.REGISTRY.items() if cls.overrides("flex_form")]
IDS = [name for name, _ in FORMED]


def encoding(name, settings, **kw):
    return tiny_gpt(name, **settings, **kw).pe


def formed_plans(pe, T, window=0, sinks=0, doc=None, x=None, layer=1):
    """(the flex plan, the own path's plan) over T tokens from position 0 (documents restart it), FoX's gates
    read from x (B, T, C) in both."""
    pos = torch.arange(T) if doc is None else torch.cat([torch.arange(n) for n in doc.bincount().tolist()])
    plans = [AttentionPlan(pos, pos, window, sinks, causal=True, doc=doc, pe=pe, flex=f) for f in (Flex(), None)]
    for p in plans:
        pe.read_input(x, p, layer)
    return plans


def qkv(T, seed, B=2, H=4, D=8, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g).requires_grad_(grad) for _ in range(3)]


def test_shaw_with_relative_values_has_no_flex_form_and_keeps_its_own_path():
    """Shaw's value term sums the probabilities per distance, which FlexAttention does not give: with it the
    model attends by its own logits even where FlexAttention is asked for, without it by FlexAttention."""
    for values, kernel in ((True, "own"), (False, "flex")):
        pe = encoding("shaw", {"shaw_values": values})
        flex = Flex([pe], n_head=4, n_embd=32)
        flex.errors["cuda"] = None   # as a probe on CUDA would find
        plan = AttentionPlan(torch.arange(8), torch.arange(8), causal=True, pe=pe, flex=flex)
        assert pe.flex_formed == (not values)
        assert choose_kernel(on_cuda(plan)) == kernel


@pytest.mark.parametrize("name, settings", FORMED, ids=IDS)
@pytest.mark.parametrize("window, sinks, docs", [(0, 0, False), (5, 2, True)])
def test_the_flex_form_run_eagerly_equals_the_encodings_own_attention(name, settings, window, sinks, docs):
    """FlexAttention's eager (uncompiled) version of the form: its scores qa . ka plus the form's bias, at 40
    tokens (a window and sinks, two documents), equal the encoding's logits and softmax."""
    pe = encoding(name, settings)
    doc = (torch.arange(40) >= 17).long() if docs else None
    x = torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(1))
    flex_plan, own_plan = formed_plans(pe, 40, window, sinks, doc, x)
    q, k, v = qkv(40, 2)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        got = flex_mod.attention(q, k, v, flex_plan, 1, compiled=False)
        want = pe.attend(q, k, v, own_plan, 1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_dynamic_build_that_fails_compiles_per_length_from_then_on(monkeypatch):
    """torch 2.13's CPU FlexAttention compiled for dynamic lengths fails to build some masks (a window's): the
    model's FlexAttention then compiles per length, for good, and the forward still gets its output."""
    calls = []

    def functions(self, compiled=True, dynamic=True):
        def flex(q, k, v, score_mod=None, block_mask=None, scale=None):
            calls.append(dynamic)
            if dynamic:
                raise torch._inductor.exc.InductorError(RuntimeError("cur_qSplitSize undeclared"), None)
            return q + 1
        return (lambda *a, **kw: None), flex
    monkeypatch.setattr(Flex, "functions", functions)
    pe = encoding("fox", {})
    x = torch.randn(1, 8, 32)
    plan = formed_plans(pe, 8, x=x)[0]
    q = torch.zeros(1, 4, 8, 8)
    with torch.no_grad():
        y = flex_mod.attention(q, q, q, plan, 1)
        flex_mod.attention(q, q, q, plan, 1)
    assert calls == [True, False, False] and isinstance(plan.flex.static, torch._inductor.exc.InductorError)
    torch.testing.assert_close(y, q * (1.0 / 8 ** 0.5) + 1)   # the form's queries, scaled, through the static one


@pytest.mark.slow
@pytest.mark.parametrize("name, settings", FORMED, ids=IDS)
@pytest.mark.parametrize("window, sinks, docs", [(0, 0, False), (9, 2, True)])
def test_compiled_flex_attention_equals_the_own_path_at_two_lengths(name, settings, window, sinks, docs):
    """attention_kernel=flex on CPU (no gradients): the model takes FlexAttention for the encoding's own logits at
    136 and 200 tokens (with a window, sinks and two documents) and its logits equal the default path's."""
    model = tiny_gpt(name, window=window, sinks=sinks, attention_kernel="flex", **settings)
    default = tiny_gpt(name, window=window, sinks=sinks, **settings)
    for T in (136, 200):
        idx = torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(T))
        doc = (torch.arange(T) >= 61).long() if docs else None
        pos = torch.cat([torch.arange(61), torch.arange(T - 61)]) if docs else None
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no fallback to the other kernels
            kernels = {p.kernel for p in model.plans(torch.arange(T) if pos is None else pos, None, model.encodings,
                                                     doc=doc).values()}
            got = model(idx, pos=pos, doc=doc)[0]
            want = default(idx, pos=pos, doc=doc)[0]
        assert kernels == {"flex"} and model.flex.errors == {"cpu": None}
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def graphs_at_two_lengths(name, device="cpu", lengths=(144, 176), **settings):
    """(graphs dynamo compiled for the second length, whether FlexAttention fell back to compiling per length, the
    largest difference from the default path) of a model taking FlexAttention at both lengths on `device`."""
    from torch._dynamo.utils import counters
    model = tiny_gpt(name, attention_kernel="flex", **settings).to(device)
    default = tiny_gpt(name, **settings).to(device)
    default.flex = None
    graphs, worst = [], 0.0
    for T in lengths:
        idx = torch.randint(0, 40, (1, T), generator=torch.Generator().manual_seed(T)).to(device)
        with torch.no_grad():
            assert {p.kernel for p in model.plans(torch.arange(T, device=device), None,
                                                  model.encodings).values()} == {"flex"}
            worst = max(worst, float((model(idx)[0] - default(idx)[0]).abs().max()))
        graphs.append(counters["stats"]["unique_graphs"])
    return graphs[1] - graphs[0], model.flex.static is not None, worst


@pytest.mark.slow
def test_compiled_flex_attention_serves_a_second_length_without_compiling_again():
    """Compiled for dynamic lengths: ALiBi's FlexAttention at 176 tokens reuses the graphs its forward at 144 made
    (a static compile makes new ones per length), equal to the default path. On CPU (torch 2.13) the own logits'
    forms fail to build for dynamic lengths (their key-indexed tables: an undeclared cur_kvSplitSize) and compile
    per length (on CUDA they are to build once: unmeasured; benchmarks/gpu_check.py compares their gradients there)."""
    new_graphs, static, worst = graphs_at_two_lengths("alibi")
    assert new_graphs == 0 and not static and worst < 1e-5


def form_backward_check(name, settings):
    """Inductor's check of a score_mod's joint graph before it lowers FlexAttention's backward (CUDA), run on CPU
    on the flex form's bias: the tables it reads (its closure's tensors) lifted as inputs needing a gradient."""
    import sys
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch._inductor.kernel.flex.flex_attention import validate_joint_graph
    hop = sys.modules["torch._higher_order_ops.flex_attention"]
    pe = encoding(name, settings)
    x = torch.randn(1, 16, 32)
    plan = formed_plans(pe, 16, x=x)[0]
    q, k, v = qkv(16, 3, B=1, grad=True)
    form = pe.flex_form(q, k, v, plan, 1)[3]
    if form is None:   # no bias (Transformer-XL's form): no score_mod to lower
        return 0
    cells = form.__closure__
    lifted = [i for i, c in enumerate(cells) if isinstance(c.cell_contents, torch.Tensor)
              and c.cell_contents.requires_grad]

    def score_mod(s, b, h, qi, ki, *tables):
        new = list(cells)
        for i, t in zip(lifted, tables):
            new[i] = types.CellType(t)
        f = types.FunctionType(form.__code__, form.__globals__, form.__name__, None, tuple(new))
        return s + f(b, h, qi, ki, lambda i: i, lambda j: j).to(s.dtype)
    scalars = (torch.zeros((), requires_grad=True),) + tuple(torch.zeros((), dtype=torch.int) for _ in range(4))
    tables = tuple(cells[i].cell_contents.detach().requires_grad_() for i in lifted)
    with TransformGetItemToIndex():
        joint = hop.create_fw_bw_graph(score_mod, scalars, tables)[1]
    validate_joint_graph(joint.graph)
    return len(tables)


@pytest.mark.slow
@pytest.mark.parametrize("name, settings", FORMED, ids=IDS)
def test_the_flex_forms_pass_flex_attentions_backward_check(name, settings):
    """Training on CUDA takes FlexAttention with the tables' gradients: inductor refuses a score_mod that reads a
    tensor needing a gradient more than once (FoX's sums, read at the query and at the key, are two tensors)."""
    form_backward_check(name, settings)
