"""On a GPU with mamba-ssm installed, the mamba-ssm SSD path (seqdsl/lower/mamba_paths.py) equals
the reference recurrence in outputs, final state and the gradient of every input, for the keys of
Mamba-2, its ablations and RetNet; a prefill on it hands its state on exactly. Skipped without
CUDA or mamba-ssm (benchmarks/build_mamba_ssm.py builds it)."""

from __future__ import annotations

import pytest
import torch

from seqdsl.lower import mamba_paths
from seqdsl.lower.paths import RecurrentInputs, _recurrent_reference
from tests.ir.test_support import _library_key

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and bool(mamba_paths.importable()),
                       reason="mamba-ssm is not importable here"),
]

SSD_SPECS = ["mamba2", "mamba2_no_decay", "mamba2_no_conv", "mamba2_no_groupnorm", "mamba2_rope",
             "mamba2_alibi", "retnet"]


def _inputs(key, T: int, dtype=torch.float32):
    """q and k per group (B, T, G, K), as the projections make them; v, log decay, state."""
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g).cuda().to(dtype)
    B, H, G, K, V = 2, key.heads, mamba_paths.groups(key), key.feature_dim, key.value_cols
    log_decay = None if key.decay_shape == "none" else -torch.rand(B, T, H, generator=g).cuda() * 0.3
    m = RecurrentInputs(q=rnd(B, T, G, K) * key.scale, k=rnd(B, T, G, K), v=rnd(B, T, H, V), log_decay=log_decay)
    return m, rnd(B, H, K, V).float() * 0.1


def _heads(key, m: RecurrentInputs) -> RecurrentInputs:
    """Each group's q and k repeated over its heads (MixerModule._heads)."""
    r = key.heads // m.q.shape[2]
    return RecurrentInputs(q=m.q.repeat_interleave(r, dim=2), k=m.k.repeat_interleave(r, dim=2), v=m.v,
                           log_decay=m.log_decay)


def _rel(x, y) -> float:
    return ((x.double() - y.double()).norm() / (y.double().norm() + 1e-30)).item()


@pytest.fixture
def no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _forward_backward(fn, key, m, S):
    leaves = {f: getattr(m, f).detach().clone().requires_grad_() for f in ("q", "k", "v", "log_decay")
              if getattr(m, f) is not None}
    S = S.detach().clone().requires_grad_()
    o, S_out = fn(key, _heads(key, RecurrentInputs(**leaves)), S)
    (o.float().square().sum() + S_out.float().square().sum()).backward()
    return [o, S_out] + [t.grad for t in leaves.values()] + [S.grad]


@pytest.mark.parametrize("name", SSD_SPECS)
def test_mamba_ssd_matches_the_reference_with_every_gradient(name, no_tf32):
    key = _library_key(name)
    m, S = _inputs(key, T=600)  # over two of mamba's 256-step chunks, not a multiple of them
    fast = _forward_backward(mamba_paths.run, key, m, S)
    ref = _forward_backward(lambda k, mm, s: _recurrent_reference(k, mm, s, False), key, m, S)
    what = ["output", "state", "dq", "dk", "dv", "dlog_decay", "dS0"][:len(ref) - 1] + ["dS0"]
    errors = {w: _rel(x, y) for w, x, y in zip(what, fast, ref)}
    print(f"\n{name}: " + ", ".join(f"{w} {e:.1e}" for w, e in errors.items()))
    # Triton's float32 dots run as tf32 inside mamba's kernels: ~1e-3 relative
    assert errors["output"] < 5e-3 and errors["state"] < 5e-3, errors
    assert all(e < 2e-2 for e in errors.values()), errors


def test_mamba_prefill_state_continues_exactly():
    key = _library_key("mamba2")
    m, S = _inputs(key, T=500)
    m = _heads(key, m)
    part = lambda t0, t1: RecurrentInputs(**{f: getattr(m, f)[:, t0:t1] for f in ("q", "k", "v", "log_decay")})
    o1, S1 = mamba_paths.run(key, part(0, 300), S)
    o2, S2 = mamba_paths.run(key, part(300, 500), S1)
    o, S_all = mamba_paths.run(key, m, S)
    assert _rel(torch.cat([o1, o2], dim=1), o) < 1e-3 and _rel(S2, S_all) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mamba_self_check_passes_here(dtype):
    key = _library_key("mamba2")
    ok, detail = mamba_paths.self_check(dtype, torch.device("cuda"), key.feature_dim, key.value_cols,
                                        mamba_paths.groups(key), key.heads, True)
    assert ok, detail
