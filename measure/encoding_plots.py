"""The numbers behind the pictures of what each positional encoding does (the way the RoPE and
ALiBi papers show them), and the figures. Encodings are asked through their hooks, never by name,
so a new one in positional.REGISTRY is drawn unchanged; draw_all draws every figure (compare.py's report),
python -m measure.plots is the command line.
"""
import contextlib
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import positional  # noqa: E402
from model import GPTConfig  # noqa: E402
from positional import rope_scaling  # noqa: E402
from positional.base import Ctx  # noqa: E402
from positional.rope import rope_inv_freq  # noqa: E402
from training import checkpoint  # noqa: E402


# ---- numbers --------------------------------------------------------------------------
def rope_decay_bound(distances, head_dim=128, base=10000.0):
    """RoFormer's long-range decay bound (Su et al. 2021, section 3.4.3; Su's blog 8265). By the Abel
    transform, |sum_j h_j e^{i m theta_j}| <= (max_j |h_{j+1} - h_j|) * sum_i |S_i(m)|, with
    S_i(m) = sum_{j<i} e^{i m theta_j}, theta_j = base^(-2j/d). The curve is the mean
        B(m) = (2/d) * sum_{i=1..d/2} |S_i(m)|,      B(0) = (d/2 + 1) / 2.
    distances: (M,) -> (M,) float64, in real arithmetic (cos, sin)."""
    m = torch.as_tensor(distances, dtype=torch.float64)[:, None]                        # (M, 1)
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)     # (d/2,)
    re, im = torch.cumsum(torch.cos(m * theta), -1), torch.cumsum(torch.sin(m * theta), -1)  # S_i: (M, d/2)
    return torch.sqrt(re ** 2 + im ** 2).mean(-1)


def expected_logits(pe, n_distances, head_dim):
    """E over x ~ N(0, I) of the attention logit when query and key carry the same content x, for
    a query at position L = n-1 and keys m = 0 .. n-1 back, mean over heads; (n,) float32 by distance.
    With identity projections each head sees x plus its slice of the position embedding e:
        E[f(x + e_L, x + e_{L-m})] = E[f(x, x)] + mean_h f(e_L,h, e_{L-m},h) + mean_h bias_h(L, L-m)
        f(q, k) = <rotate(q), rotate(k)> / sqrt(D)   (or the logits of an encoding that forms them)
    f is at most quadratic in x, so E[f(x, x)] is exact over the 2D vectors +-sqrt(D) u_b (mean 0,
    covariance I): no sampling. The split of the embedding term assumes f bilinear (true for q.k)."""
    L = n_distances - 1
    q_pos, k_pos = torch.tensor([L]), torch.arange(n_distances)

    def f(q, k):                                                   # (B, H, 1, D), (B, H, n, D) -> (B, H', 1, n)
        q, k = pe.rotate(q, Ctx(q_pos, q_pos)), pe.rotate(k, Ctx(k_pos, k_pos), key=True)
        if pe.overrides("attend"):
            return pe.logits(q, k, Ctx(q_pos, k_pos), 0)
        return (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)

    with torch.no_grad():
        basis = torch.eye(head_dim) * math.sqrt(head_dim)
        x = torch.cat([basis, -basis])[:, None, None, :]                       # (2D, 1, 1, D): B=2D, H=1
        score = torch.zeros(n_distances)
        for chunk in x.split(32):                                              # bounds memory at long lengths
            score += f(chunk, chunk.expand(-1, 1, n_distances, head_dim)).sum(0).mean(0)[0] / len(x)
        e_k = position_table(pe, n_distances)                                 # (n, C) or None
        if e_k is not None:
            H = e_k.shape[-1] // head_dim
            a = e_k[-1:].view(1, H, head_dim)[:, :, None, :]                   # (1, H, 1, D): the query's
            b = e_k.view(n_distances, H, head_dim).transpose(0, 1)[None]       # (1, H, n, D)
            score = score + f(a, b)[0, :, 0].mean(0)
        bias = pe.dense_bias(q_pos, k_pos)                                     # (H, 1, n) or None
        if bias is not None:
            score = score + bias[:, 0].mean(0)
    return score.flip(0).float()                                               # index = distance


def bias_by_distance(pe, n_distances):
    """(H, n_distances) score bias of each head for a key m = 0 .. n-1 positions back, or None."""
    with torch.no_grad():
        bias = pe.dense_bias(torch.tensor([n_distances - 1]), torch.arange(n_distances))  # (H, 1, n)
    return None if bias is None else bias[:, 0].flip(-1).float()


def position_table(pe, n_positions):
    """(n_positions, C) what the encoding adds to the token embeddings at 0 .. n-1, or None: none for an
    encoding without embed, or whose embed depends on the content (conv, rnn, multiplicative: no table)."""
    if not pe.overrides("embed") or not hasattr(pe, "n_embd"):
        return None
    pos = torch.arange(n_positions)
    with torch.no_grad():
        x = torch.randn(1, n_positions, pe.n_embd, generator=torch.Generator().manual_seed(0))
        table = pe.embed(torch.zeros_like(x), Ctx(pos, pos))[0].float()
        return table if torch.allclose(pe.embed(x, Ctx(pos, pos))[0] - x[0], table, atol=1e-5) else None


def scaled_inv_freq(head_dim, base, method=None, factor=1.0, orig_len=None):
    """(head_dim/2,) inverse frequencies of RoPE after an extension method of
    positional/rope_scaling (None: plain RoPE); orig_len is the trained length."""
    settings = None
    if method:
        settings = rope_scaling.METHODS[method][1](rope_factor=factor, rope_original_max_position=orig_len)
    return rope_inv_freq(head_dim, base, method, settings)[0].double()


# ---- figures ----------------------------------------------------------------------------
def save(fig, path):
    """The figure as a PNG at path; a line plot in a palette of 256 colours (a third of the bytes of a committed
    report's figures, the same to the eye), a figure with an image (a heat map, a colour bar) in full colour."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if fig.get_layout_engine() is None:   # a constrained layout places itself
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    full_colour = any(ax.images for ax in fig.axes)
    plt.close(fig)
    return small_png(path, full_colour)


def small_png(path, full_colour=False):
    """Rewrite the PNG at path smaller: its colours in a palette of 256 (antialiased lines lose nothing visible),
    or, full_colour, every colour kept and only the compression tightened. -> path."""
    from PIL import Image   # matplotlib's own dependency
    with Image.open(path) as im:
        rgb = im.convert("RGB")   # savefig's background is opaque
    small = rgb if full_colour else rgb.quantize(256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    return path


@contextlib.contextmanager
def figure(path, figsize=(10, 5), train_len=None, **axes):
    """Yields the axes of a new figure; on exit marks the training length, sets `axes` (ax.set's
    keywords), puts the legend right of the lines and writes the PNG to path."""
    fig, ax = plt.subplots(figsize=figsize)
    yield ax
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", label=f"training length {train_len}")
    ax.set(**axes)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)


def draw_rope_decay(path, head_dim=128, length=1024, bases=(1e4, 1e5, 1e6)):
    m = torch.arange(length)
    with figure(path, (8, 4), xlabel="relative distance m", ylabel="(2/d) Σ_i |S_i(m)|",
                title=f"RoPE long-range decay bound (d = {head_dim})") as ax:
        for base in bases:
            ax.plot(m.numpy(), rope_decay_bound(m, head_dim, base).numpy(), label=f"base {base:g}", lw=1)
    return path


def draw_expected_logits(path, encodings, length=1024):
    """encodings: {label: (PositionalEncoding, head_dim)}. Drawn relative to distance 0, so that heads
    of different widths (sqrt(D) at distance 0) share one axis. Encodings whose scores read the layer
    input (read_input: FoX's gates, PaTH's transforms) have no logit without that input and are left out."""
    with figure(path, (8.5, 4.5), xlabel="relative distance m = i - j", ylabel="E[logit(m)] - E[logit(0)]",
                title="Expected attention logit against distance, identical q = k ~ N(0, I)") as ax:
        for label, (pe, head_dim) in encodings.items():
            if not pe.overrides("read_input"):
                curve = expected_logits(pe, length, head_dim)
                ax.plot((curve - curve[0]).numpy(), label=f"{label}, D={head_dim}", lw=1)
        ax.set_yscale("symlog", linthresh=4)  # linear near 0; ALiBi's straight fall stays on the page
    return path


def draw_bias_per_head(path, bias, title):
    """bias: (H, n) from bias_by_distance."""
    with figure(path, (8, 4), xlabel="relative distance i - j", ylabel="bias added to the logit", title=title) as ax:
        for h, row in enumerate(bias):
            ax.plot(row.numpy(), label=f"head {h}", lw=1)
    return path


def draw_similarity(path, table, title):
    """The (T, T) cosine similarity between the rows of a position table (T, C)."""
    unit = torch.nn.functional.normalize(table, dim=-1)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    im = ax.imshow((unit @ unit.T).numpy(), cmap="RdBu_r", vmin=-1, vmax=1)
    fig.colorbar(im, ax=ax, label="cosine similarity")
    ax.set(xlabel="position", ylabel="position", title=title)
    return save(fig, path)


def draw_rope_angles(path, head_dim=128, base=10000.0, train_len=1024, factor=4.0):
    """Left, middle: angle of the fastest and the slowest pair against position, per extension method.
    Right: theta'_j / theta_j per pair: 1 = extrapolation, 1/factor = interpolation."""
    curves = {m or "RoPE": scaled_inv_freq(head_dim, base, m, factor, train_len)
              for m in (None, "linear", "ntk", "yarn")}
    m = torch.arange(0, int(train_len * factor) + 1, max(1, int(train_len * factor) // 512))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, j, which in ((axes[0], 0, "fastest"), (axes[1], head_dim // 2 - 1, "slowest")):
        for label, inv in curves.items():
            ax.plot(m.numpy(), (m * inv[j]).numpy(), label=label, lw=1)   # angle m theta_j
        ax.axvline(train_len, color="grey", ls=":", label="training length")
        ax.set(xlabel="position m", ylabel="angle m·θ_j (rad)", title=f"RoPE rotation angle, {which} pair j={j}")
        ax.legend(fontsize=8)
    for label, inv in curves.items():
        axes[2].plot((inv / curves["RoPE"]).numpy(), label=label, lw=1)
    axes[2].set(xlabel="pair index j (high → low frequency)", ylabel="θ'_j / θ_j", yscale="log",
                title=f"θ'_j / θ_j: 1 extrapolates, 1/{factor:g} interpolates")
    axes[2].legend(fontsize=8)
    return save(fig, path)


# ---- every figure (compare.py's report; python -m measure.plots) -----------------------------
def draw_all(out, head_dim=128, n_head=8, length=1024, bases=(1e4, 1e5, 1e6), checkpoints=(), factor=4.0):
    """Every figure into folder `out` -> {figure name: path}; encodings with parameters are drawn only from
    trained checkpoints. The RoPE angle plot extends a training length of length / factor to `length`."""
    paths = {"rope_decay": draw_rope_decay(os.path.join(out, "rope_decay.png"), head_dim, length, bases),
             "rope_angles": draw_rope_angles(os.path.join(out, "rope_angles.png"), head_dim, bases[0],
                                             max(1, round(length / factor)), factor)}
    every = {}   # {label: (encoding, head_dim)}: the fixed ones untrained, the others as trained
    for name in positional.REGISTRY:
        pe = positional.build(GPTConfig(block_size=length, n_head=n_head, n_embd=head_dim * n_head, pos_encoding=name))
        if not any(True for _ in pe.parameters()):
            every[name] = (pe, head_dim)
    for folder in checkpoints:
        model, _ = checkpoint.load_model(folder)
        if any(True for _ in model.pe.parameters()):
            every[f"{model.pe.name} (trained)"] = (model.pe.eval(), model.config.n_embd // model.config.n_head)
    unbounded = {k: v for k, v in every.items() if v[0].max_positions is None or v[0].max_positions >= length}
    paths["expected_logits"] = draw_expected_logits(os.path.join(out, "expected_logits.png"), unbounded, length)
    for label, (pe, _) in every.items():
        slug = label.replace(" (trained)", "_trained")
        n = min(length, pe.max_positions or length)
        bias, table = bias_by_distance(pe, n), position_table(pe, min(n, 256))
        if bias is not None:
            paths[f"{slug}_bias"] = draw_bias_per_head(os.path.join(out, f"{slug}_bias.png"), bias,
                                                       f"{label}: bias per head against distance")
        if table is not None:
            paths[f"{slug}_similarity"] = draw_similarity(os.path.join(out, f"{slug}_similarity.png"), table,
                                                          f"{label}: cosine similarity of positions")
    return paths
