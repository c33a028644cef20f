"""Evaluation: held-out loss per domain (`evaluate`, seqdsl/eval/loss.py), comparison of runs at
matched training loss (seqdsl/eval/compare.py, plot.py), checkpoint reading for `seqdsl eval`.

`evaluate` and `DomainLoss` are imported on first use, so `seqdsl compare` (which reads JSON
and draws) never pays for importing torch.
"""

__all__ = ["DomainLoss", "EvalError", "evaluate"]


def __getattr__(name: str):
    if name in __all__:
        from seqdsl.eval import loss

        return getattr(loss, name)
    raise AttributeError(f"module 'seqdsl.eval' has no attribute {name!r}")
