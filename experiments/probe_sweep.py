"""The probe sweep of docs/probe_results.md: every spec of specs/ on every probe task, with
`seqdsl probe` itself, spread over GPUs and worker processes.

A unit is one (spec, task, seed): one `seqdsl probe SPEC --tasks TASK --seed S` with the sweep's
settings (SETTINGS), in its own output folder. Tiny models leave a GPU mostly idle, so several
workers share one. Units are claimed with an atomic mkdir, so a second `run` on other GPUs (a GPU
freed by another job) joins the same sweep without repeating work. A unit that failed or ran past
--timeout is recorded as such (in ROOT, and by `collect` in docs/probe_results/) and is not run
again unless `run --retry` asks.

    python experiments/probe_sweep.py plan                              # the units and a command
    python experiments/probe_sweep.py run --out ROOT --gpus 3 --workers 4 [--until EPOCH_S]
    python experiments/probe_sweep.py status --out ROOT
    python experiments/probe_sweep.py collect --out ROOT                # -> docs/probe_results/

`collect` merges the units' probe.jsonl into docs/probe_results/probe.jsonl and their outcomes
(wall time, GPU) into units.jsonl, beside the units collected before; `run` skips those, so a
later session goes on where the last one stopped. experiments/probe_report.py turns them into
docs/probe_results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # seqdsl from this checkout, as experiments/report.py
sys.path.insert(0, str(REPO / "experiments"))
from gpu_jobs import gpu_name, pool, sayer, timed  # noqa: E402
from seqdsl.atomic import write_atomic  # noqa: E402
DEST = REPO / "docs" / "probe_results"
# Most telling first: if the machine goes back, the recall tasks of every spec are in.
TASK_ORDER = ("mqar", "copy", "selective_copy", "needle", "induction", "a5", "s5")
SETTINGS = ("--seq-len", "32", "--steps", "2000", "--batch", "128", "--lr", "1e-3", "--preset", "tiny")
# Extra seeds measure the spread a gap is judged against (the reference spec only: a whole
# library per seed does not fit one session's GPU time).
SPREAD_SEEDS = {"transformer": (1, 2)}
# The sweep measures what each mixer can learn, so it runs the reference path, the spec's
# meaning (docs/lowering.md); the fast paths are held to it by tests. It also keeps a worker
# clear of first-call compiles and fla's stalls (docs/lowering.md, Paths).
ENV = {"SEQDSL_PATH": "reference", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Unit:
    spec: str  # a file of specs/, without .seq
    task: str
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.spec}-{self.task}-s{self.seed}"

    def command(self, out: Path, extra: tuple[str, ...] = ()) -> list[str]:
        """`extra` (a dry run on a CPU: --device cpu --steps 2) goes last, so it wins."""
        return ["seqdsl", "probe", f"specs/{self.spec}.seq", "--tasks", self.task, *SETTINGS,
                "--seed", str(self.seed), "--device", "cuda", "--quiet", "--no-plot", "--resume",
                "--out", str(out), *extra]


def library() -> list[str]:
    specs = sorted(p.stem for p in (REPO / "specs").glob("*.seq"))
    return sorted(specs, key=lambda s: s != "transformer")  # the reference first


def units(specs: list[str] | None = None) -> list[Unit]:
    specs = specs or library()
    return [Unit(s, t, seed) for t in TASK_ORDER for s in specs for seed in (0, *SPREAD_SEEDS.get(s, ()))]


def committed(dest: Path) -> dict[str, tuple[dict, list[str]]]:
    """The units already collected into `dest` (a later session's sweep goes on from them): unit
    name -> (its outcome, its records' lines)."""
    try:
        outcomes = [json.loads(line) for line in (dest / "units.jsonl").read_text().splitlines() if line.strip()]
        lines = [line for line in (dest / "probe.jsonl").read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return {}
    found: dict[str, tuple[dict, list[str]]] = {o["unit"]: (o, []) for o in outcomes}
    for line in lines:
        r = json.loads(line)
        name = Unit(Path(r["spec"]).stem, r["task"], r["settings"]["seed"]).name
        if name in found:
            found[name][1].append(line)
    return found


def outcome(root: Path, unit: Unit) -> dict | None:
    try:
        return json.loads((root / "units" / unit.name / "unit.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def claim(root: Path, unit: Unit, retry: bool) -> bool:
    """Take `unit` for this process: False when it is done here, failed here (unless retry) or
    another live worker holds it. A claim whose process is gone (a lost call) is taken over."""
    done = outcome(root, unit)
    if done is not None and (done["rc"] == 0 or not retry):
        return False
    path = root / "claims" / unit.name
    while True:
        try:
            path.mkdir(parents=True)
            break
        except FileExistsError:
            if _held(path):
                return False
            try:  # moved aside atomically: of two processes taking it over, one rename succeeds
                path.rename(path.with_name(f"{path.name}.stale-{os.getpid()}-{time.time_ns()}"))
            except OSError:
                return False
    (path / "pid").write_text(str(os.getpid()))
    return True


def _held(claim_dir: Path) -> bool:
    """Whether a live worker other than this process holds the claim."""
    try:
        holder = int((claim_dir / "pid").read_text())
    except (OSError, ValueError):
        return True  # claimed a moment ago, its pid not written yet
    if holder == os.getpid():
        return False  # an earlier claim under this pid (a restarted container): the queue gives a unit once
    try:
        os.kill(holder, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's process


def execute(root: Path, unit: Unit, gpu: int, timeout: float, extra: tuple[str, ...]) -> dict:
    out = root / "units" / unit.name
    out.mkdir(parents=True, exist_ok=True)
    cmd = unit.command(out, extra)
    env = {**os.environ, **ENV, "CUDA_VISIBLE_DEVICES": str(gpu)}
    started = time.time()
    rc, seconds = timed(cmd, env, out / "probe.log", timeout)
    result = {"unit": unit.name, "spec": unit.spec, "task": unit.task, "seed": unit.seed, "rc": rc,
              "wall_s": round(seconds, 1), "gpu": gpu, "gpu_name": gpu_name(gpu),
              "command": shlex.join(cmd),
              "env": ENV, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}
    (out / "unit.json").write_text(json.dumps(result) + "\n")
    return result


def run(args: argparse.Namespace) -> int:
    root = args.out.resolve()
    done = {name for name, (o, _) in committed(args.records).items() if o["rc"] == 0 or not args.retry}
    todo: queue.Queue[Unit] = queue.Queue()
    for unit in units(args.only):
        if unit.name not in done:  # collected by an earlier sweep: not run again
            todo.put(unit)
    lock = threading.Lock()  # claims: one worker at a time (the mkdir is atomic across processes)
    say = sayer()

    def handle(unit: Unit, gpu: int) -> None:
        with lock:
            mine = claim(root, unit, args.retry)
        if mine:
            r = execute(root, unit, gpu, args.timeout, tuple(args.extra))
            say(f"gpu {gpu}: {unit.name} rc={r['rc']} in {r['wall_s']:.0f} s")

    say(f"{todo.qsize()} units, {args.workers} worker(s) on each of GPU(s) {args.gpus}")
    gpus = [int(g) for g in args.gpus.split(",")]
    pool(todo, [g for g in gpus for _ in range(args.workers)], handle, until=args.until, say=say)
    say("sweep worker pool done")
    return 0


def status(args: argparse.Namespace) -> int:
    earlier = committed(args.records)
    counts: dict[str, int] = {}
    for unit in units(args.only):
        r = outcome(args.out, unit) or earlier.get(unit.name, (None, []))[0]
        state = "not run" if r is None else "done" if r["rc"] == 0 else f"rc={r['rc']}"
        counts[state] = counts.get(state, 0) + 1
        if r is not None and r["rc"] != 0:
            print(f"{unit.name}: {state} after {r['wall_s']} s")
    print(", ".join(f"{n} {state}" for state, n in counts.items()))
    return 0


def collect(args: argparse.Namespace) -> int:
    """Merge the units run under --out into those --dest holds (a unit run again replaces its
    earlier outcome and records; every other unit of --dest stays), in the sweep's unit order,
    units no longer planned last, and write --dest."""
    merged = committed(args.dest)
    for unit in units(args.only):
        r = outcome(args.out, unit)
        if r is not None:
            path = args.out / "units" / unit.name / "probe.jsonl"
            lines = path.read_text().splitlines() if r["rc"] == 0 and path.exists() else []
            merged[unit.name] = (r, [line for line in lines if line.strip()])
    order = {unit.name: i for i, unit in enumerate(units())}
    names = sorted(merged, key=lambda name: order.get(name, len(order)))  # stable: unplanned keep their order
    records = [line for name in names for line in merged[name][1]]
    outcomes = [json.dumps(merged[name][0]) for name in names]
    args.dest.mkdir(parents=True, exist_ok=True)
    for name, lines in (("probe.jsonl", records), ("units.jsonl", outcomes)):
        write_atomic(args.dest / name, "".join(f"{line}\n" for line in lines))
    print(f"{len(records)} records of {sum(merged[n][0]['rc'] == 0 for n in names)} finished units "
          f"({len(names)} run) in {args.dest}")
    return 0


def plan(args: argparse.Namespace) -> int:
    todo = units(args.only)
    print(f"{len(todo)} units, for example:\n  {shlex.join(todo[0].command(Path('ROOT/units') / todo[0].name))}")
    print(f"  environment: {' '.join(f'{k}={v}' for k, v in ENV.items())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("plan", "run", "status", "collect"):
        p = sub.add_parser(name)
        p.add_argument("--only", nargs="+", metavar="SPEC", help="spec names (default: all of specs/)")
        if name != "plan":
            p.add_argument("--out", type=Path, required=True, help="the sweep's working folder")
        if name in ("run", "status"):
            p.add_argument("--records", type=Path, default=DEST,
                           help="units collected here are done (default: docs/probe_results)")
    r = sub.choices["run"]
    r.add_argument("--gpus", default="0", help="comma-separated GPU indices (default 0)")
    r.add_argument("--workers", type=int, default=4, help="worker processes per GPU (default 4)")
    r.add_argument("--timeout", type=float, default=900, help="seconds one unit may take (default 900)")
    r.add_argument("--until", type=float, help="start no unit after this time (seconds since the epoch)")
    r.add_argument("--retry", action="store_true", help="run failed and timed-out units again")
    r.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="arguments appended to every `seqdsl probe` (a CPU dry run: --device cpu --steps 2)")
    sub.choices["collect"].add_argument("--dest", type=Path, default=DEST)
    args = parser.parse_args(argv)
    return {"plan": plan, "run": run, "status": status, "collect": collect}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
