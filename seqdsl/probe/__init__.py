"""Synthetic probes (`seqdsl probe`, docs/probes.md): small tasks that measure what a mixer can
select, generated from a seed, each with an oracle that proves it solvable.

Layout, one job per module:

    batch.py      `Batch` (inputs, targets, answer mask) and `Level` (one difficulty)
    recall.py     multi-query associative recall (Zoology's MQAR) and induction
    copying.py    copying and selective copying
    needle.py     passkey retrieval in generated filler or in held-out text
    state.py      A5 / S5 word problems (state tracking, the negative control)
    registry.py   the tasks by name, with their default difficulties
    model.py      a spec's small model for a task (the preset, the task's vocabulary)
    fit.py        training on a task and accuracy per difficulty
    records.py    the JSON records (probe.jsonl), resume keys, the table
    plot.py       accuracy against difficulty, a panel per task, a line per spec
    sweep.py      specs x tasks: train, evaluate, record, with a progress display

The generators (batch.py to registry.py) need torch only for the tensors they return; the
oracles are plain Python over one row's prefix, independent of how the generator built it.
"""
