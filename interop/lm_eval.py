"""A posgpt checkpoint as a model of lm-evaluation-harness (EleutherAI), registered as `posgpt`.

    python -m interop.lm_eval --model posgpt --model_args out_dir=out-rope,rope_scaling=yarn,rope_factor=4 ...

lm_eval 0.4.13 has no plugin entry point, so this module registers the class, then runs lm_eval's
own command line. model_args: out_dir, device, max_length (default: block_size) and any model key
or encoding setting, as evaluate.py takes them; batch_size is ignored (docs/interop.md).

score(): the tokens to score are predicted in disjoint windows of up to max_length, each from the
max_length tokens before its end. No BOS token: an empty context cannot be scored, and
loglikelihood_rolling conditions on the first token (evaluate.py's non-overlapping chunks).
generate_until decodes greedily with the KV cache and cuts at the first stop string.
"""
import sys

import torch
import torch.nn.functional as F

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError:   # an optional extra: the command says so in one line
    if __name__ != "__main__":
        raise
    print("error: lm-eval is not installed; pip install -r requirements-hf.txt (the optional extras)",
          file=sys.stderr)
    sys.exit(2)

from training import checkpoint
from training.config import coerce


@register_model("posgpt")
class PosgptLM(LM):
    def __init__(self, out_dir, device="cpu", max_length=0, batch_size=1, max_batch_size=None, **overrides):
        super().__init__()
        overrides = {k: coerce(k, v) for k, v in overrides.items()}
        if str(device).startswith("cuda") and not torch.cuda.is_available():   # lm_eval's default, without CUDA
            device = "cpu"
        self.model, ckpt = checkpoint.load_model(out_dir, overrides, device, strict=False)
        self.encode, self.decode, _ = checkpoint.tokenizer_of(ckpt)
        self._device = device
        self.max_length = int(max_length) or ckpt["model_args"]["block_size"]

    @torch.no_grad()
    def score(self, ids, first):
        """(sum of log p(ids[i] | ids[:i]) over i >= first, whether each of them is the argmax)."""
        total, greedy, L = 0.0, True, self.max_length
        for a in range(first, len(ids), L):
            b = min(a + L, len(ids))                                        # this window predicts ids[a:b]
            x = torch.tensor([ids[max(0, b - 1 - L):b - 1]], device=self.device)
            lp = F.log_softmax(self.model(x)[0][0, -(b - a):].float(), -1)  # (b - a, V)
            want = torch.tensor(ids[a:b], device=self.device)
            total += lp.gather(1, want[:, None]).sum().item()
            greedy = greedy and bool((lp.argmax(-1) == want).all())
        return total, greedy

    def loglikelihood(self, requests, disable_tqdm=False):
        out = []
        for context, continuation in (r.args for r in requests):
            ctx = self.encode(context)
            if not ctx:
                raise ValueError("posgpt has no BOS token: an empty context cannot be scored")
            out.append(self.score(ctx + self.encode(continuation), len(ctx)))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        return [self.score(self.encode(text), 1)[0] for (text,) in (r.args for r in requests)]

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for context, kw in (r.args for r in requests):
            until = kw.get("until") or []
            until = [until] if isinstance(until, str) else until
            n = int(kw.get("max_gen_toks", 256))
            limit = self.model.max_positions or self.max_length + n
            ids = self.encode(context)[-(limit - n):]
            x = torch.tensor([ids], device=self.device)
            text = self.decode(self.model.generate(x, n, top_k=1)[0, len(ids):].tolist())   # greedy
            cut = min([text.index(s) for s in until if s in text], default=len(text))
            out.append(text[:cut])
        return out


if __name__ == "__main__":
    from lm_eval.__main__ import cli_evaluate
    sys.exit(cli_evaluate())
