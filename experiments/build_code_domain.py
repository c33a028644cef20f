"""Build the study's code domain from source files on this machine, pinned by their hashes.

The corpus has no code text, and none can be downloaded; every project machine has the Python
standard library's sources. This script writes them as one shard, one document per file:

    python experiments/build_code_domain.py --out data/code            # checks the manifest
    python experiments/build_code_domain.py --out data/code --write-manifest

The manifest (`experiments/code_domain.manifest.json`, committed) lists every file's path,
size and SHA-256. Without `--write-manifest` the build must reproduce it exactly, so the code
domain of the study is the same text on every machine that rebuilds it; a machine whose
standard library differs is refused with the first file that differs (a different image makes
a different domain, and the study's numbers would not be comparable).

Test suites (`test/`, `tests/`, `idle_test/`) are left out: they are mostly generated data and
repeated boilerplate, not code as people write it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import sysconfig
from pathlib import Path

MANIFEST = Path(__file__).with_name("code_domain.manifest.json")
SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})
SHARD_NAME = "python_stdlib.jsonl.zst"


def source_files(root: Path) -> list[Path]:
    """Every .py file under root outside the skipped folders, in a fixed (sorted) order."""
    files = [p for p in root.rglob("*.py") if not SKIPPED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def documents(root: Path) -> list[dict]:
    docs = []
    for path in source_files(root):
        raw = path.read_bytes()
        text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            continue  # empty __init__.py files: no text to evaluate
        rel = path.relative_to(root).as_posix()
        docs.append({"text": text, "meta": {"path": rel, "bytes": len(raw),
                                             "sha256": hashlib.sha256(raw).hexdigest()}})
    return docs


def manifest_of(docs: list[dict], root: Path) -> dict:
    files = [{"path": d["meta"]["path"], "bytes": d["meta"]["bytes"], "sha256": d["meta"]["sha256"]} for d in docs]
    digest = hashlib.sha256("\n".join(f"{f['path']} {f['sha256']}" for f in files).encode()).hexdigest()
    return {"root": str(root), "python": sysconfig.get_python_version(), "files": len(files),
            "bytes": sum(f["bytes"] for f in files), "digest": digest, "listing": files}


def first_difference(expected: dict, actual: dict) -> str:
    want = {f["path"]: f["sha256"] for f in expected["listing"]}
    have = {f["path"]: f["sha256"] for f in actual["listing"]}
    for path in sorted(set(want) | set(have)):
        if want.get(path) != have.get(path):
            state = "missing here" if path not in have else "not in the manifest" if path not in want else "differs"
            return f"{path} ({state})"
    return "none"


def write_shard(docs: list[dict], out: Path) -> Path:
    import zstandard

    out.mkdir(parents=True, exist_ok=True)
    target = out / SHARD_NAME
    tmp = target.with_suffix(".tmp")
    lines = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs).encode("utf-8")
    tmp.write_bytes(zstandard.ZstdCompressor(level=19).compress(lines))
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]),
                        help="the source tree (default: this interpreter's standard library)")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the shard into (its name is the domain)")
    parser.add_argument("--write-manifest", action="store_true", help="record this machine's files as the manifest")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help=argparse.SUPPRESS)  # tests use their own
    args = parser.parse_args(argv)
    manifest = args.manifest

    docs = documents(args.root)
    actual = manifest_of(docs, args.root)
    if args.write_manifest:
        manifest.write_text(json.dumps(actual, indent=1) + "\n")
        print(f"wrote {manifest}")
    elif not manifest.exists():
        print(f"error: no manifest at {manifest}; run with --write-manifest to record one", file=sys.stderr)
        return 2
    else:
        expected = json.loads(manifest.read_text())
        if expected["digest"] != actual["digest"]:
            print(f"error: the sources under {args.root} are not the manifest's (first difference: "
                  f"{first_difference(expected, actual)}); the code domain would be other text. Build it on "
                  f"a machine with Python {expected['python']}'s standard library as in the manifest.",
                  file=sys.stderr)
            return 2
    shard = write_shard(docs, args.out)
    print(f"{shard}: {actual['files']} files, {actual['bytes']:,} bytes, digest {actual['digest'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
