"""The evaluation sets of a run: its data source, tokenizer and held-out split, from config.json.

Rebuilds exactly the held-out text training evaluated on (same source, tokenizer, held-out
fraction and token budget, from the run's recorded config), with two overrides: other data
files (`--data`) and other domains (`--domains`). The data pipeline itself (sources, tokenizer,
held-out selection) is seqdsl/data/*; this module only maps a config onto it.
"""

from __future__ import annotations

from seqdsl.data.evalset import EvalSet
from seqdsl.errors import SeqError

ALL_DOMAINS = "*"


def _pipeline():
    try:
        from seqdsl.data import builtin, heldout, shards, tokenizer
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("seqdsl"):
            raise
        raise SeqError(f"`seqdsl eval` needs the data pipeline ({err.name}), which this installation "
                       "lacks") from None
    return builtin, heldout, shards, tokenizer


def run_eval_sets(config: dict, *, data: list[str] | None = None, domain_field: str | None = None,
                  domains: list[str] | None = None, max_tokens: int | None = None) -> dict[str, EvalSet]:
    builtin, heldout, shards, tokenizer = _pipeline()
    cfg = config.get("data", {}) or {}
    field = domain_field or cfg.get("domain_field")
    text_field = cfg.get("text_field", "text")
    kind = "files" if data else cfg.get("source", "builtin")
    if kind == "builtin":
        source = builtin.BuiltinSource()
    elif kind == "files":
        source = shards.ShardSource(list(data or cfg.get("files", [])), domain_field=field, text_field=text_field)
    elif kind == "hub":
        source = shards.HubSource(cfg["hub"], split=cfg.get("hub_split", "train"), domain_field=field,
                                  text_field=text_field)
    else:
        raise SeqError(f"the run's config names an unknown data source {kind!r}")
    chosen = list(domains or cfg.get("eval_domains") or source.domains())
    trained = list(cfg.get("train_domains", []))
    if ALL_DOMAINS in trained:
        trained = list(chosen)
    return heldout.build_eval_sets(
        source, tokenizer.load_tokenizer(cfg.get("tokenizer", "bytes")), chosen, trained,
        heldout=float(cfg.get("heldout", 0.05)), max_tokens=int(max_tokens or cfg.get("eval_tokens", 65_536)))
