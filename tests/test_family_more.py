"""The rest of the survey's family (issue #26): each encoding's formula by hand."""
import torch

from positional.base import Ctx
from tests.conftest import tiny_gpt


def test_rope_learned_freq_at_alpha_zero_is_rope_and_alpha_gets_a_gradient():
    rope, learned = tiny_gpt("rope").pe, tiny_gpt("rope_learned_freq").pe
    with torch.no_grad():
        learned.alpha.zero_()
    q, ctx = torch.randn(2, 4, 9, 8, requires_grad=True), Ctx(torch.arange(3, 12), torch.arange(3, 12))
    torch.testing.assert_close(learned.rotate(q, ctx), rope.rotate(q, ctx))
    learned.rotate(q, Ctx(ctx.q_pos, ctx.k_pos)).square().mul(torch.randn(2, 4, 9, 8)).sum().backward()
    assert learned.alpha.grad is not None and learned.alpha.grad.abs().min() > 0
    with torch.no_grad():   # alpha_i = log 2 doubles frequency i: the angle at position m is 2 m theta_i
        learned.alpha.fill_(torch.log(torch.tensor(2.0)).item())
    m = torch.tensor([5])
    torch.testing.assert_close(learned.angles(m, learned.inv_freq), 2 * rope.angles(m, rope.inv_freq))
