"""`seqdsl eval`: reading checkpoints (the run-directory contract), the CLI's table and records,
and one clear message for missing or damaged checkpoints."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_model

import seqdsl
import seqdsl.eval.sets
from seqdsl.cli.main import main
from seqdsl.data.bytes import encode_bytes
from seqdsl.data.evalset import EvalSet
from seqdsl.run.loss import evaluate
from seqdsl.run.rundir import CheckpointError, build_model, read_checkpoint
from seqdsl.eval.metrics import read_run
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel

SPEC = """mixer attn { heads = 2  head_dim = 16  position = rope }
model tiny_attn { layers = 2  d_model = 32  vocab = 256  context = 16  mixer = attn }
"""
STEP = 7


def write_run(root: Path, *, hashes: bool = True, config: dict | None = None,
              heldout: float = 0.05) -> tuple[Path, LanguageModel]:
    program = seqdsl.loads(SPEC).program
    torch.manual_seed(0)
    lm = LanguageModel(program, model_at(program).model)
    run = root / "run"
    ckpt = run / "checkpoints" / f"step_{STEP:08d}"
    ckpt.mkdir(parents=True)
    save_model(lm, str(ckpt / "model.safetensors"))
    (ckpt / "spec.seq").write_text(SPEC)
    digest = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    state = {"step": STEP, "tokens": 7000} | ({"files": {"model.safetensors": digest}} if hashes else {})
    (ckpt / "state.json").write_text(json.dumps(state))
    (run / "checkpoints" / "latest").write_text(ckpt.name)
    cfg = {"model": "tiny_attn", "preset": None, "seq_len": 16, "eval_batch": 2,
           "data": {"source": "builtin", "train_domains": ["docstrings"], "tokenizer": "bytes",
                    "heldout": heldout, "eval_tokens": 400}}
    (run / "config.json").write_text(json.dumps(config if config is not None else cfg))
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "tokens": 10, "loss": 5.0}) + "\n")
    return run, lm


def small_sets() -> dict[str, EvalSet]:
    text = "The quick brown fox jumps over the lazy dog. " * 4
    code = "def f(x):\n    return x * 2\n" * 6
    return {"prose": EvalSet("prose", encode_bytes(text), len(text.encode()), True),
            "code": EvalSet("code", encode_bytes(code), len(code.encode()), False)}


@pytest.mark.parametrize("where", ["run", "run/checkpoints", f"run/checkpoints/step_{STEP:08d}"])
def test_checkpoint_is_found_from_run_checkpoints_or_step_directory(tmp_path, where):
    run, lm = write_run(tmp_path)
    ckpt = read_checkpoint(tmp_path / where)
    assert (ckpt.step, ckpt.tokens, ckpt.run) == (STEP, 7000, run)
    loaded = build_model(ckpt, "cpu")
    tokens = torch.randint(0, 256, (2, 20))
    assert torch.equal(loaded(tokens)[0], lm.eval()(tokens)[0])


def test_cli_appends_eval_records_the_loss_of_evaluate(tmp_path, monkeypatch, capsys):
    run, lm = write_run(tmp_path)
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    assert main(["eval", str(run), "--seq-len", "40"]) == 0  # longer than the trained context 16
    printed = capsys.readouterr().out
    expected = evaluate(lm, small_sets(), seq_len=40, batch_size=2, device="cpu")
    assert "prose" in printed and f"{expected['code'].loss:.4f}" in printed
    evals = read_run(run).evals
    assert {(p.domain, p.in_domain, p.step, p.seq_len) for p in evals} == {
        ("prose", True, STEP, 40), ("code", False, STEP, 40)}
    assert {p.domain: p.loss for p in evals} == pytest.approx({d: r.loss for d, r in expected.items()})


def test_cli_out_writes_json_and_leaves_the_run_alone(tmp_path, monkeypatch):
    run, _ = write_run(tmp_path)
    before = (run / "metrics.jsonl").read_text()
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    out = tmp_path / "eval.json"
    assert main(["eval", str(run), "--out", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [r["seq_len"] for r in records] == [16, 16]  # the run's seq_len by default
    assert (run / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("target", ["metrics.jsonl", "config.json", f"checkpoints/step_{STEP:08d}/model.safetensors",
                                    "nowhere/eval.json", "."])
def test_an_out_onto_the_runs_own_files_or_nowhere_is_refused_before_evaluating(tmp_path, monkeypatch, capsys, target):
    run, _ = write_run(tmp_path)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: pytest.fail("evaluated"))
    assert main(["eval", str(run), "--out", str(run / target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and "Traceback" not in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_appending_drops_a_truncated_last_line_first(tmp_path, monkeypatch, capsys):
    """A training killed mid-write left half a record: `seqdsl eval` drops it, says so, and the
    run reads whole again, its new records after the old ones."""
    run, _ = write_run(tmp_path)
    before = (run / "metrics.jsonl").read_text()
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "tra')  # killed mid-write
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    assert main(["eval", str(run)]) == 0
    assert "dropped the last line" in capsys.readouterr().out
    text = (run / "metrics.jsonl").read_text()
    assert text.startswith(before)
    assert [json.loads(x)["domain"] for x in text[len(before):].splitlines()] == ["prose", "code"]
    assert not read_run(run).notes  # nothing left to skip


def _damage_weights(run: Path) -> None:
    path = next(run.glob("checkpoints/step_*/model.safetensors"))
    path.write_bytes(path.read_bytes()[:100])


@pytest.mark.parametrize("damage, message", [
    (lambda run: (run / "checkpoints" / "latest").unlink(), "no complete checkpoint"),
    (lambda run: next(run.glob("checkpoints/step_*/spec.seq")).unlink(), "spec.seq is missing"),
    (_damage_weights, "does not match its hash"),
    (lambda run: next(run.glob("checkpoints/step_*/state.json")).write_text("{"), "cannot read state.json"),
])
def test_missing_or_damaged_checkpoint_is_one_message_exit_2(tmp_path, capsys, damage, message):
    run, _ = write_run(tmp_path)
    damage(run)
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_a_checkpoint_without_hashes_is_refused(tmp_path):
    """Training always records its files' hashes; without them nothing can be verified."""
    run, _ = write_run(tmp_path, hashes=False)
    with pytest.raises(CheckpointError, match="lists no file hashes"):
        read_checkpoint(run)


def test_weights_of_another_model_are_refused(tmp_path):
    run, _ = write_run(tmp_path)
    spec = next(run.glob("checkpoints/step_*/spec.seq"))
    spec.write_text(SPEC.replace("layers = 2", "layers = 3"))
    with pytest.raises(seqdsl.SeqError, match="does not fit model `tiny_attn`"):
        build_model(read_checkpoint(run), "cpu")


def test_missing_path_is_one_message(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope")]) == 2
    assert "no such checkpoint or run directory" in capsys.readouterr().err


def test_cli_rebuilds_the_runs_heldout_sets_through_the_data_pipeline(tmp_path, capsys, stdlib_sample):
    # the builtin corpus from a sample of the standard library: half of it held out, so that the
    # sample's few code files still give held-out text
    run, lm = write_run(tmp_path, heldout=0.5)
    assert main(["eval", str(run), "--domains", "docstrings,code"]) == 0
    evals = {p.domain: p for p in read_run(run).evals}
    assert set(evals) == {"docstrings", "code"}
    assert evals["docstrings"].in_domain and not evals["code"].in_domain
    assert all(p.seq_len == 16 and p.loss > 0 for p in evals.values())


def test_eval_rebuilds_the_model_a_run_trained_at_a_preset(tmp_path):
    """spec.seq holds the trained model (resized, renamed, the tokenizer's vocabulary): eval must
    build it as it stands, not resize it again from config.json."""
    from tests.train.helpers import micro_run_args

    args = micro_run_args(tmp_path, steps=4)
    args[1] = str(Path(__file__).resolve().parents[2] / "specs" / "transformer.seq")
    run = tmp_path / "run"
    assert main(args + ["--set", 'preset="tiny"', "--set", "seq_len=16", "--out", str(run)]) == 0
    lm = build_model(read_checkpoint(run), "cpu")
    assert lm.spec.name == "transformer_tiny" and lm.spec.context == 16


def test_eval_rebuilds_exactly_the_heldout_sets_training_evaluated(tmp_path, monkeypatch, capsys):
    """The run lists `eval_domains = ["code"]` and trains on `web`: training evaluates web (in
    domain) then code, and `seqdsl eval` on the run must rebuild those same sets (same domains,
    order, tokens and bytes) and give the records training wrote for the same checkpoint."""
    from seqdsl.eval.sets import run_eval_sets
    from seqdsl.run.data import RunData
    from tests.train.helpers import micro_run_args

    built = []
    real = RunData.heldout_sets

    def recorded(self, tokenizer):
        built.append(real(self, tokenizer))
        return built[-1]

    monkeypatch.setattr(RunData, "heldout_sets", recorded)
    run = tmp_path / "run"
    args = micro_run_args(tmp_path, steps=4) + ["--set", 'data.eval_domains=["code"]', "--out", str(run)]
    assert main(args) == 0
    (trained,) = built
    monkeypatch.setattr(RunData, "heldout_sets", real)
    rebuilt = run_eval_sets(json.loads((run / "config.json").read_text()))
    assert list(trained) == list(rebuilt) == ["web", "code"]
    for domain, s in trained.items():
        r = rebuilt[domain]
        assert (s.domain, s.n_bytes, s.in_domain) == (r.domain, r.n_bytes, r.in_domain)
        assert torch.equal(s.tokens, r.tokens)

    def evals(lines: list[str]) -> list[dict]:
        return [json.loads(x) for x in lines if json.loads(x)["kind"] == "eval" and json.loads(x)["step"] == 4]

    logged = evals((run / "metrics.jsonl").read_text().splitlines())
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    appended = evals((run / "metrics.jsonl").read_text().splitlines())[len(logged):]
    assert [r["domain"] for r in logged] == ["web", "code"] and len(appended) == len(logged)
    for a, b in zip(logged, appended):  # the same schema, sets and weights: the same numbers
        assert a.keys() == b.keys()
        assert {k: v for k, v in a.items() if k not in ("loss", "bpb")} == \
            {k: v for k, v in b.items() if k not in ("loss", "bpb")}
        assert (b["loss"], b["bpb"]) == pytest.approx((a["loss"], a["bpb"]), rel=1e-6)


@pytest.mark.parametrize("trained, in_domain", [
    ({"data": {"train_domains": ["docstrings"]}}, [False, False]),
    # a mixed-domain run on the builtin corpus: a domain of the same name was trained on
    ({"data": {"train_domains": ["*"]}, "train_domains": ["code", "docstrings", "manual"]}, [True, False]),
])
def test_eval_on_other_files_scores_every_domain_of_them(tmp_path, trained, in_domain):
    from tests.train.helpers import write_shards

    config = {"seq_len": 16, "eval_batch": 2, "train_domains": None} | trained
    run, _ = write_run(tmp_path, config={k: v for k, v in config.items() if v is not None})
    other = write_shards(tmp_path / "other")
    assert main(["eval", str(run), "--data", str(other), "--max-tokens", "100", "--out",
                 str(tmp_path / "e.json")]) == 0
    records = json.loads((tmp_path / "e.json").read_text())["records"]
    assert [(r["domain"], r["in_domain"]) for r in records] == list(zip(["code", "web"], in_domain))
    assert all(r["eval_tokens"] >= 99 for r in records)


def test_eval_of_an_unknown_domain_is_one_message(tmp_path, capsys):
    run, _ = write_run(tmp_path)
    assert main(["eval", str(run), "--domains", "docstring"]) == 2
    err = capsys.readouterr().err
    assert "unknown domain `docstring`" in err and "docstrings" in err and "Traceback" not in err


def test_cli_shows_progress_on_stderr_unless_quiet(tmp_path, monkeypatch, capsys):
    run, _ = write_run(tmp_path)
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    assert main(["eval", str(run), "--out", str(tmp_path / "a.json")]) == 0
    lines = capsys.readouterr().err.splitlines()
    first, last = lines[0].split("/")[-1], lines[-1].split(", ")[0].split("/")[-1]
    assert lines[0] == f"evaluating prose: forward 0/{first}"  # the domains in the sets' order
    assert lines[-1].startswith(f"evaluating code: forward {last}/{last}, ") and first == last, lines
    assert main(["eval", str(run), "--out", str(tmp_path / "b.json"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_lines_are_at_most_one_per_interval_and_the_last(capsys):
    from seqdsl.cli.eval import ProgressLines

    now = [0.0]
    lines = ProgressLines(every=10.0, clock=lambda: now[0])
    for done, t in ((1, 1.0), (2, 5.0), (3, 12.0), (4, 13.0), (5, 14.0)):
        now[0] = t
        lines(done, 5, "code")
    shown = capsys.readouterr().err.splitlines()
    assert shown == ["evaluating code: forward 1/5, 0 s, about 0 s left",
                     "evaluating code: forward 3/5, 11 s, about 7 s left",
                     "evaluating code: forward 5/5, 13 s, about 0 s left"]


@pytest.mark.parametrize("flags, why", [
    (["--max-tokens", "50"], "--max-tokens 50"),
    (["--data", "{other}"], "--data evaluates other files"),
])
def test_records_of_other_text_are_printed_not_appended(tmp_path, monkeypatch, capsys, flags, why):
    """`seqdsl compare` takes a later record of a step and domain in place of training's: an
    evaluation on other text (another budget, other files) must not land in metrics.jsonl."""
    run, _ = write_run(tmp_path, config={"seq_len": 16, "eval_batch": 2, "data": {"eval_tokens": 200}})
    before = (run / "metrics.jsonl").read_text()
    monkeypatch.setattr(seqdsl.eval.sets, "run_eval_sets", lambda config, **kw: small_sets())
    assert main(["eval", str(run), *(f.format(other=tmp_path) for f in flags)]) == 0
    out = capsys.readouterr().out
    assert "prose" in out and "records not appended" in out and why in out
    assert (run / "metrics.jsonl").read_text() == before
    assert main(["eval", str(run), "--max-tokens", "200"]) == 0  # the run's own budget: appended
    assert (run / "metrics.jsonl").read_text() != before


def test_empty_domains_and_a_budget_of_one_token_are_one_message_each(tmp_path, capsys):
    run, _ = write_run(tmp_path)
    for flags, message in ((["--domains", ","], "--domains ',' names no domain"),
                           (["--max-tokens", "1"], "--max-tokens must be at least 2")):
        assert main(["eval", str(run), *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_relative_tokenizer_path_of_the_run_says_where_it_is_relative_to(tmp_path, capsys, monkeypatch):
    run, _ = write_run(tmp_path, config={"seq_len": 16, "data": {"tokenizer": "tok/tokenizer.json"}})
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert "tokenizer file not found: tok/tokenizer.json (the run's config.json names it relative" in err
    assert "Traceback" not in err
