"""experiments/probe_sweep.py: collecting merges a new sweep's units with those collected before
(a unit run again replaces its earlier result), and a sweep does not rerun collected units."""

from __future__ import annotations

import json

from tests.docs_generator import load_script

sweep = load_script("experiments/probe_sweep.py", "probe_sweep")


def record(spec: str, task: str, accuracy: float, seed: int = 0) -> str:
    return json.dumps({"kind": "probe", "spec": f"specs/{spec}.seq", "label": spec, "task": task,
                       "level": {"seq_len": 32}, "settings": {"seed": seed}, "accuracy": accuracy})


def outcome(spec: str, task: str, rc=0, seed: int = 0) -> dict:
    return {"unit": f"{spec}-{task}-s{seed}", "spec": spec, "task": task, "seed": seed, "rc": rc, "wall_s": 1.0}


def write_unit(root, spec: str, task: str, lines: list[str], rc=0) -> None:
    folder = root / "units" / f"{spec}-{task}-s0"
    folder.mkdir(parents=True)
    (folder / "unit.json").write_text(json.dumps(outcome(spec, task, rc)))
    (folder / "probe.jsonl").write_text("".join(f"{line}\n" for line in lines))


def test_collect_keeps_the_earlier_units_and_replaces_a_rerun(tmp_path):
    dest, root = tmp_path / "dest", tmp_path / "root"
    dest.mkdir()
    (dest / "units.jsonl").write_text("".join(json.dumps(outcome(s, "mqar")) + "\n" for s in ("transformer", "alibi")))
    (dest / "probe.jsonl").write_text(f"{record('transformer', 'mqar', 0.5)}\n{record('alibi', 'mqar', 0.25)}\n")
    write_unit(root, "alibi", "mqar", [record("alibi", "mqar", 0.75)])  # run again
    write_unit(root, "alibi", "copy", [record("alibi", "copy", 1.0)])  # new
    for _ in range(2):  # collecting twice changes nothing; --only never drops the other specs' units
        assert sweep.main(["collect", "--out", str(root), "--dest", str(dest), "--only", "alibi"]) == 0
        got = [(r["label"], r["task"], r["accuracy"]) for r in map(json.loads, (dest / "probe.jsonl").read_text().splitlines())]
        # unit order: task by task, the reference first
        assert got == [("transformer", "mqar", 0.5), ("alibi", "mqar", 0.75), ("alibi", "copy", 1.0)]
        units = [json.loads(line)["unit"] for line in (dest / "units.jsonl").read_text().splitlines()]
        assert units == ["transformer-mqar-s0", "alibi-mqar-s0", "alibi-copy-s0"]


def test_a_sweep_skips_the_units_collected_before(tmp_path, capsys):
    dest = tmp_path / "dest"
    dest.mkdir()
    tasks = sweep.TASK_ORDER
    seeds = (0, *sweep.SPREAD_SEEDS.get("alibi", ()))
    (dest / "units.jsonl").write_text("".join(json.dumps(outcome("alibi", t, seed=s)) + "\n" for t in tasks for s in seeds))
    (dest / "probe.jsonl").write_text("")
    assert sweep.main(["run", "--out", str(tmp_path / "root"), "--records", str(dest), "--only", "alibi"]) == 0
    assert "0 units" in capsys.readouterr().out
    (dest / "units.jsonl").write_text(json.dumps(outcome("alibi", "mqar", rc="timeout")) + "\n")
    assert sweep.main(["run", "--out", str(tmp_path / "root"), "--records", str(dest), "--only", "alibi",
                       "--until", "0"]) == 0  # the failed unit is not queued; the others are (none starts)
    assert f"{len(tasks) * len(seeds) - 1} units" in capsys.readouterr().out
    assert sweep.main(["status", "--out", str(tmp_path / "root"), "--records", str(dest), "--only", "alibi"]) == 0
    assert f"1 rc=timeout, {len(tasks) - 1} not run" in capsys.readouterr().out


def test_a_claim_is_taken_over_only_from_a_process_that_is_gone(tmp_path):
    import os
    import subprocess
    import sys

    unit = sweep.Unit("alibi", "mqar")
    assert sweep.claim(tmp_path, unit, retry=False)
    claim = tmp_path / "claims" / unit.name
    assert (claim / "pid").read_text() == str(os.getpid())
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (claim / "pid").write_text(gone.stdout.strip())  # a worker of a lost call
    assert sweep.claim(tmp_path, unit, retry=False)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as live:
        (claim / "pid").write_text(str(live.pid))  # a live worker holds it
        assert not sweep.claim(tmp_path, unit, retry=False)
        live.kill()
    (tmp_path / "units" / unit.name).mkdir(parents=True)
    (tmp_path / "units" / unit.name / "unit.json").write_text(json.dumps(outcome("alibi", "mqar", rc="timeout")))
    assert not sweep.claim(tmp_path, unit, retry=False)  # failed here: only --retry runs it again
    (claim / "pid").write_text(str(os.getpid()))
    assert sweep.claim(tmp_path, unit, retry=True)
