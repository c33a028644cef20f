"""experiments/report.py: docs/results.md is what the committed run records give, and a gap is
the spec's held-out loss minus the Transformer++ seeds' mean at a matched training loss."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.docs_generator import ROOT, load_script

report = load_script("experiments/report.py", "report")
SPEC = "mixer m { visibility = full }\nmodel m_tiny { mixer = m  layers = 1  d_model = 64  vocab = 256  context = 128 }\n"


def test_the_results_page_is_generated_from_the_committed_records():
    assert report.main(["--check"]) == 0, "docs/results.md differs from the records: run experiments/report.py"


def fake_run(root, name: str, losses: list[float], offset: dict[str, float], steps_per_eval: int = 10):
    """A run whose training loss is losses[k] over the k-th eval interval and whose held-out loss
    on each domain is that training loss plus a constant: at any matched training loss level the
    held-out values are exactly level + offset."""
    run = root / name
    run.mkdir(parents=True)
    rows, step = [], 0
    for loss in losses:
        for _ in range(steps_per_eval):
            step += 1
            rows.append({"kind": "train", "step": step, "tokens": step * 100, "loss": loss, "lr": 1e-3,
                         "tokens_per_s": 1000.0, "mfu": 0.3, "data_wait_s": 0.0, "time": float(step)})
        for domain, c in offset.items():
            rows.append({"kind": "eval", "step": step, "tokens": step * 100, "domain": domain,
                         "in_domain": domain == report.IN_DOMAIN, "loss": loss + c, "bpb": 1.0,
                         "eval_tokens": 100, "seq_len": 128})
    rows.append({"kind": "event", "step": 1, "event": "first_step", "detail": "", "seconds": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.json").write_text(json.dumps({"steps": step, "batch": 1, "seq_len": 128}))
    (run / "study.json").write_text(json.dumps({"attempts": [{"gpu": "x", "wall_s": 1, "started": "2026-11-26"}]}))
    (run / "spec.seq").write_text(SPEC)
    return report.load(run)


def test_the_gap_is_the_spec_minus_the_seed_mean_and_the_spread_their_range(tmp_path):
    curve = [7.0, 6.5, 6.0, 5.5, 5.0]
    seeds = [fake_run(tmp_path, "limited-transformer-s0", curve, {"web_blogs": 0.0, "wiki": 1.0, "code": 2.0}),
             fake_run(tmp_path, "limited-transformer-s1", curve, {"web_blogs": 0.1, "wiki": 1.2, "code": 2.1})]
    spec = fake_run(tmp_path, "limited-window-s0", [7.2, 6.6, 6.1, 5.7, 5.2], {"web_blogs": 0.05, "wiki": 1.5, "code": 2.0})
    gap = report.gap_to_baseline(spec, seeds)
    assert gap.level is not None and 5.2 < gap.level < 6.6
    assert gap.gaps["wiki"] == pytest.approx(1.5 - 1.1) and gap.spreads["wiki"] == pytest.approx(0.2)
    assert gap.gaps["code"] == pytest.approx(2.0 - 2.05) and gap.spreads["code"] == pytest.approx(0.1)
    assert gap.gaps[report.IN_DOMAIN] == pytest.approx(0.0)
    assert gap.ood_gap == pytest.approx((0.4 - 0.05) / 2)  # the in-domain gap is not an OOD gap
    assert gap.ood_spread == pytest.approx(0.15)  # the range of each seed's mean OOD loss (1.5 vs 1.65)
    assert report.measured(gap) == "worse OOD"


def test_a_spec_with_several_seeds_is_compared_by_its_mean_and_the_wider_seed_range(tmp_path):
    curve = [7.0, 6.5, 6.0, 5.5, 5.0]
    seeds = [fake_run(tmp_path, f"limited-transformer-s{s}", curve, {"web_blogs": 0.0, "wiki": 1.0 + s / 10})
             for s in (0, 1)]  # baseline: wiki 1.0 and 1.1 above the training loss, range 0.1
    runs = [fake_run(tmp_path, f"limited-mamba2-s{s}", curve, {"web_blogs": 0.0, "wiki": 1.2 + s / 2})
            for s in (0, 1)]  # the spec: 1.2 and 1.7, range 0.5
    gap = report.gap_to_baseline(runs, seeds)
    assert gap.gaps["wiki"] == pytest.approx(1.45 - 1.05)
    assert gap.spreads["wiki"] == pytest.approx(0.5)  # the spec's own range, the wider one
    assert report.measured(gap) == "within seed spread"
    one = report.gap_to_baseline(runs[:1], seeds)
    assert one.gaps["wiki"] == pytest.approx(1.2 - 1.05) and one.spreads["wiki"] == pytest.approx(0.1)


def test_trainings_at_once_counts_the_runs_overlapping_each_one(tmp_path):
    def at(name: str, start: str, wall: float):
        rec = fake_run(tmp_path, name, [6.0], {"web_blogs": 0.0})
        (rec.path / "study.json").write_text(json.dumps({"attempts": [
            {"gpu": "x", "wall_s": wall, "started": f"2026-11-26T{start}Z"}]}))
        return report.load(rec.path)

    a, b, c = at("limited-a-s0", "10:00:00", 600), at("limited-b-s0", "10:05:00", 60), at("limited-c-s0", "10:20:00", 60)
    runs = [a, b, c]
    assert [report.concurrent(r, runs) for r in runs] == [2, 2, 1]


def test_a_spec_that_never_reaches_the_baseline_loss_is_compared_at_equal_steps_and_says_so(tmp_path):
    seeds = [fake_run(tmp_path, f"limited-transformer-s{s}", [6.0, 5.5, 5.0], {"web_blogs": 0.0, "wiki": 1.0 + s / 10})
             for s in (0, 1)]
    spec = fake_run(tmp_path, "limited-random-s0", [7.5, 7.4, 7.3], {"web_blogs": 0.0, "wiki": 1.0})
    gap = report.gap_to_baseline(spec, seeds)
    assert gap.level is None and gap.note.startswith("unmatched")
    assert gap.gaps["wiki"] == pytest.approx((7.3 + 1.0) - (5.0 + 1.05))  # the last evaluations


@pytest.mark.parametrize(("verdict", "outcome", "expected"), [
    ("pass", "within seed spread", "yes"), ("pass", "better OOD", "yes"), ("pass", "worse OOD", "no"),
    ("fail", "worse OOD", "yes"), ("degraded", "worse OOD", "yes"), ("fail", "better OOD", "no"),
    ("fail", "within seed spread", "no (no gap measured)")])
def test_a_verdict_agrees_when_it_predicts_the_measured_direction(verdict, outcome, expected):
    assert report.agrees(verdict, outcome) == expected


def test_the_page_says_which_study_runs_have_no_records(tmp_path):
    runs = tmp_path / "runs"
    for name in ("limited-transformer-s0", "limited-transformer-s1", "limited-top1_element-s0"):
        shutil.copytree(ROOT / "docs" / "results" / "runs" / name, runs / name)
    records = [report.load(p) for p in sorted(runs.iterdir())]
    text = report.page(records)
    missing = [r.name for r in report.STUDY if r.name not in {x.name for x in records}]
    assert f"Not run yet ({len(missing)} of the study's {len(report.STUDY)} runs)" in text
    assert "| top1_element | pass |" in text


def test_the_mixed_setting_is_compared_with_the_limited_gap_over_the_same_domains(tmp_path):
    """A spec 0.5 worse OOD in the limited setting and 0.05 worse (within the spread) when mixed:
    the page says the gap closed, and gives the mixed gap per formerly-OOD domain."""
    curve = [7.0, 6.5, 6.0, 5.5, 5.0]
    limited = [fake_run(tmp_path, f"limited-transformer-s{s}", curve, {"web_blogs": 0.0, "wiki": 1.0 + s / 10})
               for s in (0, 1)]
    limited.append(fake_run(tmp_path, "limited-mamba2-s0", curve, {"web_blogs": 0.0, "wiki": 1.55}))
    mixed = [fake_run(tmp_path, "mixed-transformer-s0", curve, {"web_blogs": 0.0, "wiki": 0.3}),
             fake_run(tmp_path, "mixed-mamba2-s0", curve, {"web_blogs": 0.0, "wiki": 0.35})]
    for rec in mixed:
        (rec.path / "config.json").write_text(json.dumps({"steps": 50, "batch": 1, "seq_len": 128,
                                                          "train_domains": ["web_blogs", "wiki"]}))
    records = [*limited, *(report.load(r.path) for r in mixed)]
    _, facts = report.verdict_facts(records)
    lines = report.mixed_section(records, facts)
    [row] = [line for line in lines if line.startswith("| mamba2 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "+0.500 (0.100)" and cells[3] == "**+0.050**" and cells[4] == "+0.050"
    assert cells[5] == "the gap closed: within the spread when mixed"
    limited_gap = report.gap_to_baseline(limited[2], limited[:2])  # +0.5, spread 0.1
    wider = fake_run(tmp_path, "mixed-wide-s0", curve, {"web_blogs": 0.0, "wiki": 0.9})  # +0.6 when mixed
    assert report.mixing_effect(limited_gap, report.gap_to_baseline(wider, [mixed[0]])) \
        == "a gap in both settings, not smaller when mixed"
    narrower = fake_run(tmp_path, "mixed-narrow-s0", curve, {"web_blogs": 0.0, "wiki": 0.6})  # +0.3 when mixed
    assert report.mixing_effect(limited_gap, report.gap_to_baseline(narrower, [mixed[0]])) \
        == "a gap in both settings, smaller when mixed"
    assert "Mixing hid the limited setting's gap for mamba2, as the paper claims." in lines
    assert report.mixed_section(limited, facts) == []  # no mixed runs: no section


def test_the_mixing_statement_says_when_there_was_no_gap_to_hide():
    said = report.mixing_statement({"no gap in either setting": ["mamba2", "top1_chunk_exact"],
                                    "a gap only when mixed, not smaller when mixed": ["window_256"]})
    assert said[0].startswith("mamba2, top1_chunk_exact had no OOD gap beyond the seed spread in the limited setting")
    assert said[1] == ("window_256: a gap only when mixed, not smaller when mixed, "
                       "against the paper's claim that mixing hides gaps.")
