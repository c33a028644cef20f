"""benchmarks/bench_recurrent.py --smoke: the benchmark's code path on tiny shapes on the CPU (the
numbers mean nothing there; every row must be whole and the compiled form must agree with eager)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_recurrent.py"


@pytest.mark.slow
def test_benchmark_smoke_mode_times_eager_and_compiled_forms(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_recurrent", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "smoke.json"
    assert bench.main(["--smoke", "--specs", "gated_deltanet", "--recurrent", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["form"] for r in rows] == ["chunked", "chunked+compile", "recurrent"]
    assert all(r["ms"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    # float32 forms of one computation: rounding apart, the same output
    assert all(r["rel_diff_vs_eager"] < 1e-4 for r in rows[1:])
    assert "chunked+compile" in capsys.readouterr().out


def test_the_earlier_algorithms_compute_what_the_reference_does():
    """`--earlier` times other algorithms for the same function: each must give the reference's
    outputs (the delta rule's whole chunked form with each swapped in, against the loop)."""
    import torch

    spec = importlib.util.spec_from_file_location("bench_recurrent", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from seqdsl.reference.recurrent import chunked_ref, recurrent_ref

    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    x = dict(q=rnd(1, 70, 2, 16) * 0.25, k=torch.nn.functional.normalize(rnd(1, 70, 2, 16), dim=-1),
             v=rnd(1, 70, 2, 8), log_decay=-torch.rand(1, 70, 2, generator=g, dtype=torch.float64) * 0.5,
             beta=torch.sigmoid(rnd(1, 70, 2)), initial_state=rnd(1, 2, 16, 8))
    want = recurrent_ref(**x, update="delta")
    for name in bench.EARLIER:
        with bench.earlier(name):
            got = chunked_ref(**x, update="delta", chunk_size=16)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)
