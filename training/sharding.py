"""FSDP2 for train.py's --parallel=fsdp under torchrun: PyTorch's fully_shard on each block, then on the
whole model (its embeddings, final norm and encodings: one root group), so that parameters, gradients
and AdamW's state are split across the processes and a block's weights are whole only while it runs.

A checkpoint holds full state dicts gathered onto rank 0's CPU, in a one-process run's layout: the
model's state_dict and the optimizer's keyed by parameter index, so sample.py and evaluate.py load it
unchanged and it resumes under FSDP, DDP or one process alike (docs/training.md)."""
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)   # whole tensors on rank 0's CPU, {} elsewhere
SCATTER = StateDictOptions(full_state_dict=True)                    # whole tensors on every rank -> each its shard


class Hidden:
    """A block's arguments after its input x, kept out of FSDP's sight. fully_shard's pre-forward hooks every
    tensor needing a gradient in a module's arguments, rebuilding the dataclasses that hold one, and the
    attention plan (a dataclass with derived fields, holding the encodings' score bias) cannot be rebuilt.
    Hooking x alone is what FSDP needs: the block's gradients are reduced once x's gradient is complete,
    which every path through the block reaches; the bias's gradient flows on to the root's encodings."""
    __slots__ = ("args", "kwargs")

    def __init__(self, args, kwargs):
        self.args, self.kwargs = args, kwargs


def hide(module, args, kwargs):
    return (args[0], Hidden(args[1:], kwargs)), {}


def reveal(module, args, kwargs):
    x, hidden = args
    return (x, *hidden.args), hidden.kwargs


def shard(model, rt):
    """model (on rt.device) sharded in place across rt.world processes: a group per block, then the rest.
    The encodings are the root's: every block reads them, and the root's weights stay whole from the start
    of the forward to the end of the backward (FSDP does not reshard the root after its forward)."""
    mesh = init_device_mesh(rt.device_type, (rt.world,))
    for block in model.h:
        fully_shard(block, mesh=mesh)
        block.register_forward_pre_hook(hide, prepend=True, with_kwargs=True)   # runs before FSDP's pre-forward
        block.register_forward_pre_hook(reveal, with_kwargs=True)               # and this one after it
    fully_shard(model, mesh=mesh)
    return model


def problem(model):
    """Why fully_shard cannot shard `model`, in one line, or None."""
    scalars = [n for n, p in model.named_parameters() if p.dim() == 0]
    if scalars:
        return (f"parallel=fsdp cannot shard {model.pos_name}'s 0-dimensional parameters ({', '.join(scalars)}): "
                f"fully_shard splits tensors along their first dimension; train it with DDP (drop --parallel)")
    return None


def held(model, rt):
    """The line saying what this rank holds of the sharded model's parameters (and so of their gradients and
    AdamW state)."""
    mine, total = sum(local(p).numel() for p in model.parameters()), sum(p.numel() for p in model.parameters())
    return (f"fsdp: {len(model.h)} blocks and the rest sharded across {rt.world} processes; rank {rt.rank} holds "
            f"{mine:,} of {total:,} parameters ({mine / total:.0%}), and as much of their gradients and AdamW state")


def local(p):
    """This rank's part of a parameter (all of it when it is not sharded)."""
    return p.to_local() if isinstance(p, DTensor) else p


def everywhere(flag, rt):
    """Whether `flag` holds on every rank (one all-reduce), so that the ranks decide together."""
    t = torch.tensor(float(flag), device=rt.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t)


def full_state(model, optimizer):
    """{"model": state dict, "optimizer": state dict} whole on rank 0's CPU, in one process's layout (by_index);
    None on the other ranks. Every rank calls it: the shards are gathered."""
    weights = get_model_state_dict(model, options=GATHER)
    optim = get_optimizer_state_dict(model, optimizer, options=GATHER)
    return {"model": weights, "optimizer": by_index(optim)} if dist.get_rank() == 0 else None


def load_optimizer(model, optimizer, state):
    """Load a checkpoint's whole optimizer state (by_index layout, on every rank) into the sharded optimizer."""
    set_optimizer_state_dict(model, optimizer, by_name(state, model, optimizer), options=SCATTER)


def by_index(state):
    """An optimizer state dict keyed by parameter names (FSDP's full state dicts) in torch.optim's own layout:
    the parameters numbered 0, 1, ... in the order of the param groups, as Optimizer.state_dict() numbers them."""
    index = {name: i for i, name in enumerate(n for g in state["param_groups"] for n in g["params"])}
    return {"state": {index[name]: s for name, s in state["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]}


def by_name(state, model, optimizer):
    """by_index's inverse for `optimizer` over `model`'s parameters (named as named_parameters names them)."""
    names = {p: n for n, p in model.named_parameters()}
    name = [names[p] for g in optimizer.param_groups for p in g["params"]]
    return {"state": {name[i]: s for i, s in state["state"].items()},
            "param_groups": [{**g, "params": [name[i] for i in g["params"]]} for g in state["param_groups"]]}
