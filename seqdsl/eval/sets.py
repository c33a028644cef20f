"""The evaluation sets of a run, rebuilt from its config.json for `seqdsl eval`.

By default these are exactly the held-out sets training evaluated on: the run's data config goes
through the mapping training itself uses (`seqdsl.run.data.resolve_data`: same source, domains,
tokenizer, held-out fraction and token budget). Overrides: other data files (`--data`, where the
run's domain lists do not apply: every domain of those files is evaluated, in-domain when the run
trained on a domain of that name), a domain field, the domains (`--domains`: exactly those) and
the token budget (`--max-tokens`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from seqdsl.data.evalset import EvalSet
from seqdsl.errors import SeqError, SeqFileError


def _pipeline():
    try:
        from seqdsl.data import tokenizer
        from seqdsl.run import config, data
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("seqdsl"):
            raise
        raise SeqError(f"`seqdsl eval` needs the data pipeline ({err.name}), which this installation "
                       "lacks") from None
    return config, data, tokenizer


def _data_config(config: dict, *, data: list[str] | None = None, domain_field: str | None = None,
                    max_tokens: int | None = None):
    """The run's `DataConfig` (config.json's "data") with the command line's overrides."""
    config_module, _, _ = _pipeline()
    raw = dict(config.get("data") or {})
    if data:
        raw.update(source="files", files=list(data), eval_domains=None)
        if config.get("train_domains") is not None:  # what the run resolved its domains to (["*"] included)
            raw["train_domains"] = list(config["train_domains"])
    if domain_field:
        raw["domain_field"] = domain_field
    if max_tokens:
        raw["eval_tokens"] = max_tokens
    try:
        return config_module.DataConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "data"
        raise SeqError(f"the run's config.json has a bad data setting: data.{where}: {first['msg']}") from None


def run_eval_sets(config: dict, *, data: list[str] | None = None, domain_field: str | None = None,
                  domains: list[str] | None = None, max_tokens: int | None = None) -> dict[str, EvalSet]:
    config_module, run_data, tokenizer = _pipeline()
    data_config = _data_config(config, data=data, domain_field=domain_field, max_tokens=max_tokens)
    only = domains
    if data and not domains:
        if data_config.domain_field:
            raise SeqError(f"the domains of records labelled by `{data_config.domain_field}` are only known "
                           "after reading every file", hint="list them: --domains a,b")
        only = [config_module.ALL]
    name = data_config.tokenizer
    if name != tokenizer.BYTES and not Path(name).is_absolute() and not Path(name).is_file():
        raise SeqFileError(f"tokenizer file not found: {name} (the run's config.json names it relative to the "
                           "directory training was started in)",
                           hint="run `seqdsl eval` from that directory")
    resolved = run_data.resolve_data(data_config, only=only)
    return resolved.heldout_sets(tokenizer.load_tokenizer(name))
