"""The recurrent family's training step compiles whole: `torch.compile(block, fullgraph=True)`
traces forward and backward with no graph break, and a second step of the same shape reuses the
compiled graph (no recompile). The compiled block computes what the eager one does.

Sizes: the tiny preset, one block, B = 2, T = 80 (a full chunk of the chunked reference's 64 and
a padded one, so the chunk-to-chunk state passing is traced). The backend is AOTAutograd with
eager kernels ("aot_eager"): it traces the forward and the backward graphs as inductor would,
without generating C++ (which costs tens of seconds per spec on this CPU); the GPU benchmark
(benchmarks/bench_train.py --compile) runs inductor."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.lower.lm import BlockState, LanguageModel
from tests.spec_library import SPEC_FILES, at_most_heads, spec_model

# Every test here is slow: each spec takes 2 to 20 s, and importing torch._dynamo alone costs
# seconds per pytest worker. They test compile plumbing (one graph, no recompile, compiled equals
# eager), not what the lowering computes: the fast suite's oracles (test_lm_invariants,
# test_golden) check that on the eager path, which the compiled graph traces.
pytestmark = pytest.mark.slow

RECURRENT = [p for p in SPEC_FILES if any(m.is_recurrent for m in seqdsl.load(p).program.mixers)]
B, T = 2, 80
BACKEND = "aot_eager_decomp_partition"


def blocks_of(path):
    """A tiny LM of the spec (Mamba-1 at 64 of its 256 heads: tests/spec_library.at_most_heads),
    with one block per distinct mixer of its layer pattern."""
    program, model = spec_model(path)
    lm = LanguageModel(program, at_most_heads(program, model))
    seen, blocks = set(), []
    for block in lm.blocks:
        if block.mixer.spec.name not in seen:
            seen.add(block.mixer.spec.name)
            blocks.append(block)
    return lm, blocks


def step(block, x):
    """One training step's forward and backward through the block: (output, input gradient,
    parameter gradients)."""
    x = x.detach().requires_grad_()
    y, _ = block(x, BlockState())
    params = [p for p in block.parameters() if p.requires_grad]
    grads = torch.autograd.grad((y * y).sum(), [x, *params])
    return y.detach(), grads[0], grads[1:]


def test_the_library_has_every_recurrent_family():
    names = {p.stem for p in RECURRENT}
    assert {"linear_attention", "mamba", "mamba2", "retnet", "gla", "deltanet", "gated_deltanet", "rwkv6",
            "rwkv7", "based", "hybrid_mamba2_transformer"} <= names


@pytest.mark.parametrize("path", RECURRENT, ids=[p.stem for p in RECURRENT])
def test_block_compiles_whole_and_once(path):
    import torch._dynamo

    torch.manual_seed(0)
    lm, blocks = blocks_of(path)
    lm.plan_paths("cpu")
    gen = torch.Generator().manual_seed(1)
    for block in blocks:
        # a hybrid's blocks share Block.forward's code: a second structure is a new graph, not a
        # recompile across steps, so each distinct block starts from an empty cache
        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=True, backend=BACKEND)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(2):  # the second step of the same shape must reuse the first's graph
                x = torch.randn(B, T, lm.spec.d_model, generator=gen)
                y, dx, dparams = step(compiled, x)
                y_ref, dx_ref, dparams_ref = step(block, x)
                with torch.no_grad():  # an optimizer's in-place update between the steps
                    for p, g in zip((p for p in block.parameters() if p.requires_grad), dparams_ref):
                        p.sub_(1e-3 * g)
                scale = y_ref.abs().max()
                assert (y - y_ref).abs().max() <= 1e-5 * scale, block.mixer.spec.name
                assert (dx - dx_ref).norm() <= 1e-4 * dx_ref.norm()
                for g, g_ref in zip(dparams, dparams_ref):
                    assert (g - g_ref).norm() <= 1e-4 * g_ref.norm() + 1e-12


def test_compiled_call_without_a_plan_is_refused_with_a_message():
    # planning runs self-checks and logs, which cannot be traced: fullgraph refuses, naming the fix
    import torch._dynamo

    torch.manual_seed(0)
    lm, (block, *_) = blocks_of(next(p for p in RECURRENT if p.stem == "mamba2"))
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=BACKEND)
    with pytest.raises(Exception, match="plan_paths"):
        compiled(torch.randn(B, T, lm.spec.d_model), BlockState())
