"""Long contexts at evaluation: the bias and own-logits encodings attend by query blocks (or by
FlexAttention with the bias inside its score_mod, asked for on CPU), equal to the dense path, and
no forward allocates a (T, T) tensor (issue #22)."""
import json
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import bench
import model as model_mod
import positional
from attention import flex as flex_mod
from attention import long_cpu
from tests.conftest import tiny_gpt

SCORED = [n for n, cls in positional.REGISTRY.items() if cls.needs_score_matrix]


def blocked_calls(monkeypatch, block):
    """Force ATTENTION_BLOCK = block and list the kernels of the forwards' calls of the long-context engine."""
    calls = []
    attend = long_cpu.attend
    monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", block)
    monkeypatch.setattr(long_cpu, "attend",
                        lambda q, k, v, plan, *rest: calls.append(plan.kernel) or attend(q, k, v, plan, *rest))
    return calls


@pytest.mark.parametrize("name", list(positional.REGISTRY))
@pytest.mark.parametrize("window, sinks", [(0, 0), (9, 2)])
def test_query_blocks_equal_the_dense_path(name, window, sinks, monkeypatch):
    """Blocks of 8 queries over 30 tokens, with and without a window and sinks, and a cached prefill in
    two calls (17 queries: blocks of 8, 8 and one row; then 13 queries over 30 keys), give the dense path's logits;
    an encoding attending by blocks of its own (PaTH) takes every query at once."""
    model = tiny_gpt(name, window=window, sinks=sinks)
    idx = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        dense = model(idx)[0]
        calls = blocked_calls(monkeypatch, 8)
        blocked = model(idx)[0]
        model.setup_cache(2, 30)
        cached = torch.cat([model(idx[:, :17])[0], model(idx[:, 17:])[0]], 1)
    torch.testing.assert_close(blocked, dense, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cached, dense, rtol=1e-4, atol=1e-5)
    engine = "own_blocks" if positional.REGISTRY[name].attends_by_blocks else "blocks"   # PaTH: every query at once
    assert (engine in calls) == (name in SCORED), calls


def test_documents_by_query_blocks(monkeypatch):
    """Document ids hide the other documents' keys in every block as in the dense path."""
    model = tiny_gpt("t5", window=9, sinks=2)
    idx = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(2))
    doc = torch.tensor([0] * 11 + [1] * 19)
    pos = torch.cat([torch.arange(11), torch.arange(19)])
    with torch.no_grad():
        dense = model(idx, pos=pos, doc=doc)[0]
        calls = blocked_calls(monkeypatch, 8)
        torch.testing.assert_close(model(idx, pos=pos, doc=doc)[0], dense, rtol=1e-4, atol=1e-5)
    assert calls == ["blocks"] * 2


@pytest.mark.slow
def test_compiled_flex_attention_on_cpu_equals_the_dense_path():
    """attention_kernel=flex: ALiBi's bias computed inside the score_mod, the block mask compiled, from 128 queries
    (136 = 8 mod 16: torch 2.13's CPU kernel gave wrong rows at such lengths below 128 on an AVX2 EPYC, which keep
    SDPA)."""
    idx = torch.randint(0, 40, (1, 136), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        dense = tiny_gpt("alibi", window=9, sinks=2)(idx)[0]
        model = tiny_gpt("alibi", window=9, sinks=2, attention_kernel="flex")
        kernels = {p.kernel for p in model.plans(torch.arange(136), None, model.encodings).values()}
        assert {p.kernel for p in model.plans(torch.arange(120), None, model.encodings).values()} == {"sdpa"}
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no fallback
            flex = model(idx)[0]
    assert kernels == {"flex"} and model.flex.errors == {"cpu": None}
    torch.testing.assert_close(flex, dense, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "kerple", "fire"])
def test_flex_attention_at_given_positions_and_documents(name):
    """Consecutive positions from an offset (read as index + first) and positions with gaps plus two
    documents (read from the tables) both equal the dense path (FIRE's queries past its L = 32 included)."""
    idx = torch.randint(0, 40, (1, 136), generator=torch.Generator().manual_seed(4))
    gaps = torch.cumsum(torch.randint(1, 4, (136,), generator=torch.Generator().manual_seed(5)), 0)
    doc = (torch.arange(136) >= 50).long()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback
        for pos, d in ((torch.arange(136) + 7, None), (gaps, doc)):
            dense = tiny_gpt(name, window=9, sinks=2)(idx, pos=pos, doc=d)[0]
            model = tiny_gpt(name, window=9, sinks=2, attention_kernel="flex")
            assert {p.kernel for p in model.plans(pos, None, model.encodings, doc=d).values()} == {"flex"}
            torch.testing.assert_close(model(idx, pos=pos, doc=d)[0], dense, rtol=1e-4, atol=1e-5)


BIASES = [n for n, cls in positional.REGISTRY.items() if cls.overrides("score_bias")]


def score_mod_backward_check(name):
    """Inductor's check of a score_mod's joint graph before it lowers FlexAttention's backward (CUDA), run on the
    encoding's score_mod on CPU: its parameters lifted as inputs, as torch.compile lifts them."""
    import sys
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch._inductor.kernel.flex.flex_attention import validate_joint_graph
    from torch.nn.utils.stateless import _reparametrize_module
    hop = sys.modules["torch._higher_order_ops.flex_attention"]
    pe = next(m for m in tiny_gpt(name).modules() if isinstance(m, positional.PositionalEncoding)
              and type(m).overrides("score_bias") and not isinstance(m, positional.combined.Combined))
    names, values = zip(*pe.named_parameters()) if list(pe.parameters()) else ((), ())

    def score_mod(s, b, h, qi, ki, *vals):
        with _reparametrize_module(pe, dict(zip(names, vals))):
            return s + pe.score_bias(h, qi, ki).to(s.dtype)
    scalars = (torch.zeros((), requires_grad=True),) + tuple(torch.zeros((), dtype=torch.int) for _ in range(4))
    with TransformGetItemToIndex():
        joint = hop.create_fw_bw_graph(score_mod, scalars, tuple(v.detach().requires_grad_() for v in values))[1]
    validate_joint_graph(joint.graph)


@pytest.mark.slow
@pytest.mark.parametrize("name", BIASES)
def test_the_biases_score_mods_pass_flex_attentions_backward_check(name):
    """Training on CUDA takes FlexAttention with the bias's gradient, and inductor refuses a score_mod that indexes a
    tensor needing a gradient other than once and directly (Kerple clamped before indexing, and failed on an H200,
    torch 2.11). FIRE's MLP reads its units one by one and is refused: on CUDA its training falls back (below)."""
    if name == "fire":
        with pytest.raises(NotImplementedError, match="multiple indexing"):
            score_mod_backward_check(name)
    else:
        score_mod_backward_check(name)


def test_a_forward_whose_flex_attention_fails_its_probe_takes_the_other_paths(monkeypatch):
    """FlexAttention asked for on CPU and failing its probe (standing in for FIRE's refused score_mod on CUDA):
    one warning before the first forward, then the model's other kernels, the logits of a model that never
    tried it, and no second probe in later forwards."""
    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise RuntimeError("no kernel for this score_mod")
    monkeypatch.setattr(flex_mod, "attention", broken)
    idx = torch.randint(0, 40, (1, 136), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        dense = tiny_gpt("fire")(idx)[0]
        model = tiny_gpt("fire", attention_kernel="flex")
        with pytest.warns(UserWarning, match="FlexAttention failed"):
            got = model(idx)[0]
        again = model(idx)[0]
        kernels = {p.kernel for p in model.plans(torch.arange(136), None, model.encodings).values()}
    assert calls == [1] and isinstance(model.flex.errors["cpu"], RuntimeError) and "flex" not in kernels
    torch.testing.assert_close(got, dense)
    torch.testing.assert_close(again, dense)


def test_flex_attention_compiles_its_backward_with_its_forward(monkeypatch):
    """With gradients the compiled FlexAttention lowers its backward at the forward, where its probe
    catches a failure (lazily, it would fail in loss.backward(), out of reach)."""
    seen = []

    def flex(q, k, v, score_mod, block_mask, scale=None):
        seen.append(torch._functorch.config.force_non_lazy_backward_lowering)
        return q
    monkeypatch.setattr(flex_mod.Flex, "functions",
                        lambda self, compiled=True, dynamic=True: (lambda *a, **k: None, flex))
    model = tiny_gpt("alibi")
    plan = next(iter(model.plans(torch.arange(8), None, model.encodings).values()))
    q = torch.randn(1, 4, 8, 8)
    flex_mod.attention(q, q, q, plan)
    with torch.no_grad():
        flex_mod.attention(q, q, q, plan)
    assert seen == [True, False]


def test_unknown_attention_kernel_is_refused():
    with pytest.raises(ValueError, match="attention_kernel must be"):
        tiny_gpt("alibi", attention_kernel="dense")


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any storage an op's output holds (a view counts what it views)."""
    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes() // t.element_size())
        return out


@pytest.mark.slow
@pytest.mark.parametrize("name", SCORED)
def test_no_tensor_of_t_squared_at_4096_tokens(name, monkeypatch):
    """A 1-layer, 2-head, 16-wide model over 4,096 tokens: the largest tensor of the forward is a block's
    (H, rows, Tk) scores, at most BLOCK_SCORES (within a column: Transformer-XL's shift and CoPE's counts pad
    one): 1024 rows at 2^23, 512 at 2^22 (the dense bias alone would be H * T * T = 2^25)."""
    T = 4096
    model = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, block_size=T)
    for budget in (2 ** 23, 2 ** 22):
        monkeypatch.setattr(long_cpu, "BLOCK_SCORES", budget)
        with torch.no_grad(), LargestTensor() as seen:
            model(torch.zeros(1, T, dtype=torch.long))
        assert seen.largest <= budget * (1 + 1 / T), (seen.largest, budget)


@pytest.mark.slow
def test_bench_long_section(tmp_path):
    """bench.py --sections=long: seconds, tokens/s and a process peak per encoding and length."""
    out = tmp_path / "b.json"
    bench.main(["--sections=long", "--long_lengths=96", "--encodings=alibi,learned", "--n_layer=1", "--n_head=2",
                "--n_embd=16", "--block_size=32", f"--json={out}"])
    long = json.loads(out.read_text())["long"]
    assert long["learned"] == {} and long["alibi"]["96"]["peak_bytes"] > 0
    assert long["alibi"]["96"]["tokens_per_s"] == pytest.approx(96 / long["alibi"]["96"]["s"])


@pytest.mark.slow
def test_bench_train_memory_section(tmp_path, capsys):
    """bench.py --sections=train_memory: one training step's peak per encoding, RoPE the reference,
    the machine named."""
    out = tmp_path / "b.json"
    bench.main(["--sections=train_memory", "--encodings=rope,alibi", "--n_layer=1", "--n_head=2", "--n_embd=16",
                "--block_size=32", "--batch_size=2", f"--json={out}"])
    r = json.loads(out.read_text())
    assert set(r["train_memory"]) == {"rope", "alibi"} and r["train_memory"]["alibi"]["peak_bytes"] > 0
    printed = capsys.readouterr().out
    assert f"machine: {r['machine']['name']}" in printed and "vs rope" in printed


@pytest.mark.slow
def test_bench_train_memory_records_a_failing_encoding_and_goes_on(tmp_path, capsys, monkeypatch):
    """An encoding whose training step raises (as Kerple's FlexAttention backward did on a GPU) is written down as
    failed, and the encodings after it are still measured."""
    build = bench.build

    def failing(args, pos, compile=False, **kw):
        model = build(args, pos, compile, **kw)
        if pos == "alibi":
            model.forward = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no kernel for this score_mod"))
        return model
    monkeypatch.setattr(bench, "build", failing)
    out = tmp_path / "b.json"
    bench.main(["--sections=train_memory", "--encodings=alibi,rope", "--n_layer=1", "--n_head=2", "--n_embd=16",
                "--block_size=32", "--batch_size=2", f"--json={out}"])
    r = json.loads(out.read_text())["train_memory"]
    assert r["alibi"] == {"error": "RuntimeError: no kernel for this score_mod"} and r["rope"]["peak_bytes"] > 0
    assert "alibi               failed: RuntimeError: no kernel" in capsys.readouterr().out


def test_gpu_check_script_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.py (what gpu.sh runs first on a GPU) on the CPU against itself: every row written, the
    kernels of its plans named, no difference, the static step's tokens the forward's."""
    from benchmarks import gpu_check
    out = tmp_path / "check.json"
    gpu_check.main(["--device=cpu", "--encodings=alibi,shaw", "--eval_T=40", "--train_T=24", "--gen=4", "--window=9",
                    "--n_layer=1", "--n_embd=16", "--block_size=32", f"--json={out}"])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["encoding"], r["window"]) for r in rows] == [("alibi", 0), ("alibi", 9), ("shaw", 0), ("shaw", 9)]
    assert all(r["eval_kernels"] and r["train_kernels"] and r["eval_logits_rel"] == 0 == r["train_grad_rel"]
               and r["decode_static_eq_forward"] for r in rows)


RELATIVE = [n for n, cls in positional.REGISTRY.items() if cls.relative_bias]


@pytest.mark.parametrize("name", RELATIVE)
def test_a_bias_by_distance_is_read_as_a_view(name, monkeypatch):
    """The relative kernel (keys reversed, each block's bias a Hankel view of one vector per head) equals the
    dense path; a window, documents or a cache keep the blocks; the largest storage is O(H T), not O(H T^2)."""
    model = tiny_gpt(name)
    idx = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        dense = model(idx)[0]
        monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 8)
        kernels = {p.kernel for p in model.plans(torch.arange(30), None, model.encodings).values()}
        torch.testing.assert_close(model(idx)[0], dense, rtol=1e-4, atol=1e-5)
        windowed = tiny_gpt(name, window=9)
        assert {p.kernel for p in windowed.plans(torch.arange(30), None, windowed.encodings).values()} == {"blocks"}
        gaps = torch.arange(30) * 2
        assert {p.kernel for p in model.plans(gaps, None, model.encodings).values()} == {"blocks"}
    assert kernels == {"relative"}
    T = 4096
    big = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, block_size=T)
    monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 1024)
    with torch.no_grad(), LargestTensor() as seen:
        big(torch.zeros(1, T, dtype=torch.long))
    assert seen.largest <= 64 * T, seen.largest   # the embeddings and logits, (T, 16) and (T, 40): no block of scores


@pytest.mark.slow
def test_a_bias_made_by_blocks_goes_by_chunks_through_a_cache(monkeypatch):
    """FIRE past its L (its bias reads the query position: no view) over more than ATTENTION_BLOCK queries without
    gradients: the forward runs by chunks of 8 query rows through a KV cache (GPT.by_chunks), each chunk's bias made
    once for both layers (blocks: once per layer), and equals the dense path with a window and sinks, and at gapped
    positions with documents; positions restarting per document cannot be cached and keep the blocks (a bias per
    block and layer)."""
    from positional.fire import FIRE
    made, dense_bias = [], FIRE.dense_bias
    monkeypatch.setattr(FIRE, "dense_bias", lambda self, q, k: made.append(len(q)) or dense_bias(self, q, k))
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(0, 40, (2, 48), generator=g)
    gaps, doc = torch.cumsum(torch.randint(1, 4, (48,), generator=g), 0), (torch.arange(48) >= 20).long()
    restart = torch.cat([torch.arange(20), torch.arange(28)])
    cases = [(tiny_gpt("fire", window=9, sinks=2), None, None),
             (tiny_gpt("fire"), gaps, doc),
             (tiny_gpt("fire"), restart, doc)]
    with torch.no_grad():
        dense = [model(idx, pos=pos, doc=d)[0] for model, pos, d in cases]
        assert made == [48] * 3 and cases[0][0].pe.L.abs() < 8   # one bias a forward; most queries past L
        made.clear()
        monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 8)
        for (model, pos, d), reference, bias_calls in zip(cases, dense, ([8] * 6, [8] * 6, [8] * 12)):
            torch.testing.assert_close(model(idx, pos=pos, doc=d)[0], reference, rtol=1e-4, atol=1e-5)
            assert made == bias_calls and model.kv_cache is None, made
            made.clear()
    T = 4096
    big = tiny_gpt("fire", n_layer=1, n_head=2, n_embd=16)
    monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 1024)
    with torch.no_grad(), LargestTensor() as seen:
        big(torch.zeros(1, T, dtype=torch.long))
    assert made == [512] * 8 and seen.largest <= long_cpu.BLOCK_SCORES, seen.largest   # a chunk's (2, 512, <= T) bias


BANDED = [n for n, cls in positional.REGISTRY.items() if cls.overrides("far")]


@pytest.mark.slow
@pytest.mark.parametrize("name", BANDED)
def test_a_band_of_own_logits_and_the_far_field_by_sdpa(name, monkeypatch):
    """The banded kernel (the encoding's logits on the keys less than `band` behind, far() through SDPA's fused
    kernel, joined by log-sum-exps) equals the logits path with gradients: in the model (bands shorter than the
    sequence: Shaw k = 3, DeBERTa's last bucket from 8) and called with blocks of 1 to 8 queries; a window, gapped
    positions or a cache keep the query blocks; the largest storage of a 4,096-token forward is O(T)."""
    kw = {"shaw": dict(shaw_max_distance=3), "deberta": dict(deberta_buckets=8, deberta_max_distance=12),
          "cope": dict(cope_max_position=2)}.get(name, {})
    model = tiny_gpt(name, **kw)
    if name == "fox":
        with torch.no_grad():
            model.pe.bias.fill_(-3.0)   # gates near 0.05: c falls by ~3 a position, c_i far from 0 at the end
    assert model.pe.band < 30 - 8
    idx = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(7))
    reference = model(idx)[0].detach()                               # gradients on: the logits formed
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 4, 30, 8, generator=g) for _ in range(3))
    ctx = positional.base.Ctx(torch.arange(30), torch.arange(30), causal=True)
    model.pe.read_input(torch.randn(2, 30, 32, generator=g), ctx, 1)   # FoX's gates: from a layer input
    with torch.no_grad():
        monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 8)
        assert {p.kernel for p in model.plans(torch.arange(30), None, model.encodings).values()} == {"banded"}
        torch.testing.assert_close(model(idx)[0], reference, rtol=1e-4, atol=1e-5)
        whole = model.pe.attend(q, k, v, ctx, 1)
        for rows, near_rows in ((8, 4), (7, 3), (1, 1)):
            torch.testing.assert_close(long_cpu.attend_banded(model.pe, q, k, v, ctx, 1, rows, near_rows), whole,
                                       rtol=1e-4, atol=1e-5)
        windowed = tiny_gpt(name, window=9, **kw)
        assert {p.kernel for p in windowed.plans(torch.arange(30), None, windowed.encodings).values()} == {"blocks"}
        assert {p.kernel for p in model.plans(torch.arange(30) * 2, None, model.encodings).values()} == {"blocks"}
        model.setup_cache(2, 30)
        assert {p.kernel for p in model.plans(torch.arange(30), model.kv_cache, model.encodings).values()} == {"blocks"}
        model.clear_cache()
    T = 4096
    big = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, block_size=T, **kw)
    monkeypatch.setattr(long_cpu, "ATTENTION_BLOCK", 1024)
    with torch.no_grad(), LargestTensor() as seen:
        big(torch.zeros(1, T, dtype=torch.long))
    assert seen.largest <= 2 ** 20, seen.largest   # a band's logits, 2 x 256 x 267 (the dense: 2 x T x T = 2^25)


def test_cope_rows_whose_count_has_not_reached_p_are_exact(monkeypatch):
    """CoPE's far form needs the band's gates to sum to P; with a band of 5 keys and P = 2 some rows fall short
    (gates ~0.5), and those rows are computed whole: the banded result still equals the logits path, and it
    would not if every row were taken as far (far_holds always true)."""
    from positional.cope import CoPE
    model = tiny_gpt("cope", cope_max_position=2)
    monkeypatch.setattr(model.pe, "band", 5)
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 4, 30, 8, generator=g) for _ in range(3))
    ctx = positional.base.Ctx(torch.arange(30), torch.arange(30), causal=True)
    with torch.no_grad():
        whole = model.pe.attend(q, k, v, ctx, 1)
        holds = model.pe.far_holds(q, k, ctx, 1)[..., 5:]
        assert 0 < holds.float().mean() < 0.9, holds.float().mean()
        torch.testing.assert_close(long_cpu.attend_banded(model.pe, q, k, v, ctx, 1, 8, 4), whole, rtol=1e-4, atol=1e-5)
        monkeypatch.setattr(CoPE, "far_holds", lambda self, q, k, c, layer: torch.ones(q.shape[:3], dtype=torch.bool))
        assert (long_cpu.attend_banded(model.pe, q, k, v, ctx, 1, 8, 4) - whole).abs().max() > 1e-4   # exact: ~1e-6
