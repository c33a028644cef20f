"""The plan is the one decision of which backend runs a mixer's stage (3); a call only executes
it through that backend's runtime (seqdsl/lower/paths.py: `_RUNTIMES`). Runs on CPU: the fast
runtimes are replaced by stand-ins where a GPU kernel would run."""

from __future__ import annotations

import torch

from seqdsl.lower import mamba_paths, paths
from seqdsl.lower.paths import PathChooser, Plan, RecurrentInputs
from seqdsl.reference.recurrent import recurrent_ref
from tests.ir.test_support import _library_key


def _inputs(T: int, H: int = 2, K: int = 8, V: int = 8) -> RecurrentInputs:
    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    return RecurrentInputs(q=rnd(1, T, H, K), k=rnd(1, T, H, K), v=rnd(1, T, H, V),
                           log_decay=-torch.rand(1, T, H, generator=g, dtype=torch.float64))


class _Recorder:
    @staticmethod
    def what(op):
        return "stand-in"

    def __init__(self):
        self.calls = []

    def run(self, key, path, m, S, *, step_checked=False):
        self.calls.append(path)
        return m.v, S


def test_a_recurrent_call_runs_the_runtime_of_the_planned_backend(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setitem(paths._RUNTIMES, "fla", recorder)
    chooser = PathChooser(_library_key("mamba2"), "mamba2")
    monkeypatch.setattr(chooser, "plan", lambda device, dtype=None: Plan("fla.chunk_simple_gla", "planned"))
    for T in (5, 1):  # a chunk and a decoding step: the plan decides both
        chooser.recurrent(_inputs(T), None)
    assert recorder.calls == ["fla.chunk_simple_gla"] * 2
    assert chooser.describe()["cpu"] == Plan("fla.chunk_simple_gla", "planned")


def test_the_mamba_runtime_runs_an_unchecked_decoding_step_on_the_reference_step():
    """The SSD kernels take chunks: one token runs recurrent_ref unless the state-update kernel
    passed its self-check (here: no mamba-ssm, so it never ran)."""
    key = _library_key("mamba2")
    m = _inputs(1)
    S = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    o, S1 = paths._RUNTIMES["mamba"].run(key, "mamba.ssd", m, S)
    o_ref, S1_ref = recurrent_ref(m.q, m.k, m.v, log_decay=m.log_decay, initial_state=S)
    assert torch.equal(o, o_ref) and torch.equal(S1, S1_ref)


def test_every_planned_recurrent_path_has_a_runtime():
    for path in ("reference.chunked", "reference.recurrent", "fla.chunk_gla", "mamba.ssd"):
        assert paths.backend(path) in paths._RUNTIMES


def test_the_mamba_runtime_refuses_only_for_a_missing_mamba_ssm(monkeypatch):
    """No machine is known where mamba-ssm's SSD kernels refuse (the stub that said so is gone);
    the self-check judges the rest."""
    assert not hasattr(mamba_paths, "known_refusal")
    key = _library_key("mamba2")
    monkeypatch.setattr(mamba_paths, "importable", lambda: "mamba-ssm is not importable here (test)")
    assert paths._RUNTIMES["mamba"].known_refusal(key, "mamba.ssd") == "mamba-ssm is not importable here (test)"
    monkeypatch.setattr(mamba_paths, "importable", lambda: "")
    assert paths._RUNTIMES["mamba"].known_refusal(key, "mamba.ssd") == ""
