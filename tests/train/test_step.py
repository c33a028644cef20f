"""The training step `seqdsl train` and benchmarks/bench_train.py share (seqdsl/train/step.py):
accumulated micro batches give the gradient of the whole batch, the step reads nothing back from
the device, the loss module's split head gives the model's own loss, and `compile` compiles the
loss head as well as the blocks. The optimizer: fused AdamW on GPU parameters, foreach otherwise."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import seqdsl
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel, block_hidden
from seqdsl.train import optim
from seqdsl.run.config import RunConfig
from seqdsl.train.step import CausalLoss, apply_update, training_step
from tests.train.helpers import MICRO_SPEC


def micro_lm(seed: int = 0, layers: int | None = None) -> LanguageModel:
    program = seqdsl.loads(MICRO_SPEC).program
    model = model_at(program).model
    torch.manual_seed(seed)
    return LanguageModel(program, model if layers is None else model.model_copy(update={"layers": layers}))


def rows(n: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n, 17), generator=torch.Generator().manual_seed(seed))  # (n, T + 1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_causal_loss_is_the_models_own_next_token_loss():
    lm = micro_lm()
    x = rows()
    assert CausalLoss(lm)(x[:, :-1], x[:, 1:]) == lm.loss(x[:, :-1], x[:, 1:])


def test_accumulated_micro_batches_give_the_whole_batch_gradient():
    lm = micro_lm()
    x = rows(4)
    stats = training_step(CausalLoss(lm), lm.parameters(), x, 1, autocast_dtype=None, clip=1e9)
    # reference: one forward and backward over the whole batch, without the step's loop (float32:
    # a float64 copy is another function, its RMSNorm eps being float64's)
    ref = copy.deepcopy(lm)
    for p in ref.parameters():
        p.grad = None
    loss = ref.loss(x[:, :-1], x[:, 1:])
    loss.backward()
    assert abs(stats[0].item() - loss.item()) <= 1e-6 * loss.item()
    grads = dict(ref.named_parameters())
    for name, p in lm.named_parameters():
        assert rel_err(p.grad, grads[name].grad) < 1e-5, name
    norm = torch.stack([g.grad.double().norm() for g in ref.parameters()]).norm()
    assert abs(stats[1].item() - norm.item()) <= 1e-5 * norm.item()


def test_clipping_scales_the_gradient_to_the_clip_norm():
    lm = micro_lm()
    stats = training_step(CausalLoss(lm), lm.parameters(), rows(2), 2, autocast_dtype=None, clip=1e-3)
    clipped = torch.stack([p.grad.double().norm() for p in lm.parameters()]).norm().item()
    assert stats[1].item() > 1e-3 and abs(clipped - 1e-3) <= 1e-6


def test_the_step_reads_nothing_back_from_the_device(monkeypatch):
    """One read per optimizer step is the caller's (the non-finite check); none per micro batch."""
    lm = micro_lm()
    loss_fn = CausalLoss(lm)
    reads = []
    for name in ("item", "tolist", "__float__", "__bool__", "cpu", "numpy"):
        real = getattr(torch.Tensor, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            reads.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    stats = training_step(loss_fn, lm.parameters(), rows(4), 1, autocast_dtype=None, clip=1.0)
    assert reads == []
    stats.tolist()
    assert reads == ["tolist"]


def test_micro_batch_context_marks_only_the_last_micro_batch():
    lm = micro_lm()
    entered = []

    class Around:
        def __init__(self, last):
            self.last = last

        def __enter__(self):
            entered.append(self.last)

        def __exit__(self, *exc):
            return False

    training_step(CausalLoss(lm), lm.parameters(), rows(4), 1, autocast_dtype=None, clip=1.0, micro_batch=Around)
    assert entered == [False, False, False, True]  # 4 micro batches: the last one reduces


def test_apply_update_steps_and_drops_the_gradients():
    lm = micro_lm()
    opt = optim.optimizer_for(lm, RunConfig())
    before = lm.embed.weight.detach().clone()
    training_step(CausalLoss(lm), lm.parameters(), rows(2), 2, autocast_dtype=None, clip=1.0)
    apply_update(opt)
    assert not torch.equal(before, lm.embed.weight) and all(p.grad is None for p in lm.parameters())


@pytest.mark.parametrize("scope", ["model", "block"])
def test_compile_compiles_the_model_body_and_the_head_with_its_loss(scope):
    lm = micro_lm()
    loss_fn = CausalLoss(lm, compile=True, scope=scope)
    # made at the first call, so that the body is training_hidden as FSDP2 registers it
    lm.training_hidden = wrapped = lambda tokens, run_block=None: LanguageModel.training_hidden(lm, tokens, run_block)
    body, head_loss = loss_fn._graphs()
    if scope == "model":  # one graph of the embedding and every block
        assert getattr(body, "_torchdynamo_orig_callable", None) is wrapped
    else:  # the registered body, running one compiled function for every block
        assert body.func is wrapped
        assert getattr(body.keywords["run_block"], "_torchdynamo_orig_callable", None) is block_hidden
    assert getattr(head_loss, "_torchdynamo_orig_callable", None) == loss_fn._head_loss


_TORCH_COMPILE = torch.compile


def _compiled_frames(monkeypatch, lm: LanguageModel, scope: str) -> int:
    """How many graphs dynamo captures for one training step of `lm` (frames handed to a backend,
    recompiles included), with torch.compile's backend swapped for a counting eager one."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None: _TORCH_COMPILE(fn, backend=counter))
    lm.plan_paths("cpu")  # planning is not traced
    torch._dynamo.reset()
    training_step(CausalLoss(lm, compile=True, scope=scope), lm.parameters(), rows(4), 2, autocast_dtype=None,
                  clip=1e9)
    return counter.frame_count


def test_the_block_scope_compiles_one_graph_for_blocks_of_one_structure(monkeypatch):
    """Three identical blocks and the head: two graphs (not one per block), and the model scope
    two as well (the body and the head). Blocks that differ in what the graph depends on (here a
    per-block constant) are compiled again: 3 graphs when dynamo makes the constant dynamic after
    one recompile (torch 2.13), at most one per block and the head; the raised recompile limit
    lets every block of a deep model do so."""
    assert _compiled_frames(monkeypatch, micro_lm(layers=3), "block") == 2
    assert _compiled_frames(monkeypatch, micro_lm(layers=3), "model") == 2
    differing = micro_lm(layers=3)
    for i, block in enumerate(differing.blocks):
        block.mlp_scale = float(i + 1)
        block.register_forward_hook(lambda m, args, out: (out[0] * m.mlp_scale, out[1]))
    assert 3 <= _compiled_frames(monkeypatch, differing, "block") <= 4


def test_an_unknown_compile_scope_is_refused():
    with pytest.raises(ValueError, match="compile scope"):
        CausalLoss(micro_lm(), compile=True, scope="layer")


def test_the_training_body_and_logits_equal_the_forward_logits():
    lm = micro_lm()
    x = rows()[:, :-1]
    assert torch.equal(lm.logits(lm.training_hidden(x)), lm(x)[0])


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["model", "block"])
def test_compiled_step_matches_the_eager_step(scope):
    eager, compiled = micro_lm(layers=3), micro_lm(layers=3)
    x = rows(4)
    a = training_step(CausalLoss(eager), eager.parameters(), x, 2, autocast_dtype=None, clip=1e9)
    torch._dynamo.reset()
    b = training_step(CausalLoss(compiled, compile=True, scope=scope), compiled.parameters(), x, 2,
                      autocast_dtype=None, clip=1e9)
    assert abs(a[0].item() - b[0].item()) <= 1e-5 * a[0].item()
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        assert rel_err(q.grad, p.grad) < 1e-4, name


def _fake_model(device_type: str):
    """A model whose parameters say they live on `device_type` (no GPU needed to check the choice)."""
    params = [SimpleNamespace(dim=lambda: 2, device=torch.device(device_type)),
              SimpleNamespace(dim=lambda: 1, device=torch.device(device_type))]
    return SimpleNamespace(parameters=lambda: iter(params))


@pytest.mark.parametrize("device_type, fused, foreach", [("cuda", True, None), ("cpu", None, True)])
def test_adamw_is_fused_on_the_gpu_and_foreach_elsewhere(monkeypatch, device_type, fused, foreach):
    made = {}
    monkeypatch.setattr(torch.optim, "AdamW", lambda groups, **kwargs: made.update(kwargs, groups=groups))
    optim.adamw(_fake_model(device_type), lr=1e-3, weight_decay=0.1)
    assert (made["fused"], made["foreach"]) == (fused, foreach)
    assert [g["weight_decay"] for g in made["groups"]] == [0.1, 0.0]
    assert [len(g["params"]) for g in made["groups"]] == [1, 1]


def test_optimizer_for_takes_the_run_configs_settings():
    opt = optim.optimizer_for(micro_lm(), RunConfig(lr=0.02, weight_decay=0.3, beta1=0.8, beta2=0.9))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.3, 0.0]
    assert opt.defaults["lr"] == 0.02 and opt.defaults["betas"] == (0.8, 0.9)
    assert opt.defaults["foreach"] is True and not opt.defaults["fused"]


# slow: compile plumbing (importing torch._dynamo and tracing cost seconds per worker)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer", "top1_chunk_approx", "mamba2"])
def test_the_compiled_model_body_traces_as_one_graph(name):
    """A graph break inside the block loop sends the whole compiled step back to eager (this
    happened: a state dataclass built per block); planned paths, the step traces whole."""
    import seqdsl
    from seqdsl.ir.presets import model_at

    resized = model_at(seqdsl.load(Path(__file__).resolve().parents[2] / "specs" / f"{name}.seq").program,
                       preset="tiny")
    lm = LanguageModel(resized.program, resized.model)
    lm.plan_paths("cpu")
    x = torch.randint(0, resized.model.vocab, (2, 17), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lm.training_hidden)(x[:, :-1])
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def _incoming_gradients(lm) -> dict[str, list[int]]:
    """The storage address of every gradient the backward hands to each parameter (what a CUDA
    graph's backward would return from its pool). Addresses only: holding the tensors would
    stop autograd from installing them as .grad, the very behaviour under test."""
    seen: dict[str, list[int]] = {}
    for name, p in lm.named_parameters():
        seen[name] = []
        p.register_hook(lambda g, name=name: seen[name].append(g.untyped_storage().data_ptr()))
    return seen


@pytest.mark.parametrize("keep_grads", [False, True])
def test_with_kept_grads_no_backward_output_is_installed_as_a_grad(keep_grads):
    # Under CUDA graphs the backward's outputs live in the graph's pool and are overwritten by the
    # next micro batch's replay: a `.grad` that *is* such an output (autograd installs the first
    # incoming gradient itself when .grad is None) breaks accumulation. keep_grads pre-allocates
    # .grad so every micro batch is added into ordinary memory; the gradient stays the batch's.
    lm, x = micro_lm(), rows(4)
    incoming = _incoming_gradients(lm)
    training_step(CausalLoss(lm), lm.parameters(), x, 1, autocast_dtype=None, clip=1e9, keep_grads=keep_grads)
    stolen = [name for name, p in lm.named_parameters()
              if p.grad.untyped_storage().data_ptr() in incoming[name]]
    if keep_grads:
        assert stolen == []
        ref = micro_lm()
        training_step(CausalLoss(ref), ref.parameters(), x, 4, autocast_dtype=None, clip=1e9)
        for (name, p), q in zip(lm.named_parameters(), ref.parameters()):
            assert rel_err(p.grad, q.grad) < 1e-5, name
    else:  # the mechanism the option guards against is real: without it the first one is kept
        assert stolen


def test_kept_grads_are_zeroed_in_place_by_the_update():
    lm, x = micro_lm(), rows(2)
    opt = torch.optim.SGD(lm.parameters(), lr=0.1)
    training_step(CausalLoss(lm), lm.parameters(), x, 1, autocast_dtype=None, clip=1e9, keep_grads=True)
    before = {name: p.grad for name, p in lm.named_parameters()}
    apply_update(opt, keep_grads=True)
    for name, p in lm.named_parameters():
        assert p.grad is before[name] and not p.grad.any(), name
    apply_update(opt)
    assert all(p.grad is None for p in lm.parameters())
