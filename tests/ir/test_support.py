"""The support tables (seqdsl/ir/support.py) are the one statement of what each fast backend
accepts: the planner and the checker's backend rules both read them, and must agree."""

from __future__ import annotations

import pytest
import torch

from seqdsl import load
from seqdsl.check import check_program
from seqdsl.ir import nodes, support
from seqdsl.ir.key import kernel_key
from seqdsl.lower.backends import fla as fla_backend
from seqdsl.lower.backends.base import BackendName
from seqdsl.lower.paths import PathChooser
from tests.spec_library import SPEC_FILES, SPEC_IDS, SPECS_DIR


def _linear(**kw) -> nodes.Mixer:
    return nodes.Mixer(name="m", weights=nodes.Linear(), **kw)


VECTOR = nodes.DataDependentDecay(granularity="vector")
SCALAR = nodes.DataDependentDecay(granularity="scalar")


@pytest.mark.parametrize("op, mixer", [
    ("fla.chunk_simple_gla", _linear(decay=SCALAR)),
    ("fla.chunk_simple_gla", _linear(position=nodes.Alibi())),  # ALiBi: a per-head decay
    ("fla.chunk_gla", _linear(decay=VECTOR)),
    ("fla.chunk_rwkv6", _linear(decay=VECTOR, update=nodes.Additive(bonus=True))),
    ("fla.chunk_rwkv7", _linear(decay=VECTOR, update=nodes.Rwkv7())),
    ("fla.chunk_delta_rule", _linear(update=nodes.Delta())),
    ("fla.chunk_gated_delta_rule", _linear(decay=SCALAR, update=nodes.Delta())),
    ("fla.chunk_gated_delta_rule", _linear(update=nodes.Delta(), position=nodes.Alibi())),
])
def test_fla_op_follows_the_update_rule_and_the_decay_shape(op, mixer):
    assert support.fla(kernel_key(mixer, 64)) == support.Support("fla", op)


def test_fla_refuses_tiles_narrower_than_16_and_says_so():
    mamba1 = _linear(decay=VECTOR, head_dim=1, key_dim=16, heads=64)
    verdict = support.fla(kernel_key(mamba1, 64))
    assert not verdict.ok and "16-wide" in verdict.reason


@pytest.mark.parametrize("mixer, width, slot", [
    # a normalised linear attention carries a normaliser column: 64 + 1 value columns
    (nodes.Mixer(name="m", weights=nodes.NormalizedLinear(), relation=nodes.Dot(feature="elu1")), "value width 65",
     ("weights",)),
    (_linear(head_dim=48, key_dim=64), "value width 48", ("head_dim",)),
    (_linear(key_dim=96), "key width 96", ("key_dim",)),
    # Based's Taylor features: 1 + 16 + 16^2 columns
    (nodes.Mixer(name="m", weights=nodes.NormalizedLinear(), key_dim=16, relation=nodes.Dot(feature="taylor")),
     "key width 273", ("relation", "feature")),
])
def test_fla_refuses_widths_that_are_not_powers_of_two_and_says_what_to_change(mixer, width, slot):
    """Such widths did not finish fla's first call in minutes on an H100 (Triton 3.6): the
    reference runs them instead, and the checker's W003 points at the slot to change."""
    verdict = support.fla(kernel_key(mixer, 768))
    assert not verdict.ok and verdict.reason.startswith(width) and verdict.slot == slot, verdict


def test_triton_table_names_what_rules_a_top1_mixer_out():
    top = lambda **kw: nodes.Mixer(name="m", select=nodes.Top(**kw))
    assert support.triton(kernel_key(top(), 64)).op == "triton.top1_element"
    assert support.triton(kernel_key(top(over=nodes.Chunk(size=128)), 64)).op == "triton.top1_chunk"
    assert support.triton(kernel_key(top(k=2), 64)).op == "triton.topk_element"  # the STE
    assert support.triton(kernel_key(top(k=2, grad="none"), 64)).op == "triton.topk_element"
    assert "at most 64" in support.triton(kernel_key(top(k=65), 64)).reason
    odd = support.triton(kernel_key(top(over=nodes.Chunk(size=100)), 64))
    assert odd.tiling and "power of two" in odd.reason
    # lse chunk scores run on the top-k chunk kernels, k = 1 included
    assert support.triton(kernel_key(top(over=nodes.Chunk(size=64), score="lse"), 64)).op == "triton.topk_chunk"
    assert support.triton(kernel_key(top(k=4, over=nodes.Chunk(size=64), score="lse"), 64)).op == "triton.topk_chunk"
    # sink tokens under chunk selection: on the top-k kernels (k = 1 too) up to one tile of them,
    # past it the reference, with the reason and the slot to change
    assert support.triton(kernel_key(top(k=3, over=nodes.Chunk(size=128), score="mean", sink=4), 64)).op == \
        "triton.topk_chunk"
    assert support.triton(kernel_key(top(over=nodes.Chunk(size=128), sink=4), 64)).op == "triton.topk_chunk"
    sunk = support.triton(kernel_key(top(k=3, over=nodes.Chunk(size=128), score="mean", sink=200), 64))
    assert not sunk.ok and "sink tokens under chunk selection" in sunk.reason and sunk.slot == ("select", "sink")
    # chunks chosen per key/value group: on the top-k kernels in NSA's form (the own chunk, no
    # gradient through the choice), k = 1 too; with the STE gate the reference, with the reason
    shared = lambda **kw: support.triton(kernel_key(nodes.Mixer(name="m", kv_groups=1, select=nodes.Top(
        over=nodes.Chunk(size=64), share="group", **kw)), 64))
    assert shared(k=3, grad="none").op == shared(grad="none").op == "triton.topk_chunk"
    gated = shared(k=3)
    assert not gated.ok and "share = group" in gated.reason and gated.slot == ("select", "share")


def _own_mixers(path):
    loaded = load(path)
    program = loaded.program
    model = [m for m in program.models if m.name in program.own][-1]
    return loaded, model, [program.mixer(name) for name in dict.fromkeys(model.mixer)]


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_planner_and_checker_read_the_same_table(path, monkeypatch):
    """For every library spec: where the table refuses every fast backend, the planner's
    reason is the table's and the checker warns (W002/W003); where the table accepts one, the
    checker is silent about speed and the planner either takes that op or names the run-time
    fact (not importable here, known refusal) that stops it.

    Without a GPU no fla kernel can pass its self-check, so the plan for "cuda" ends on the
    reference whether fla imports or not; the test says fla does not, rather than import it (7 s
    on 2 cores). test_cli_lower's slow GPU-plan test runs the real import."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(fla_backend, "importable", lambda: False)
    loaded, model, mixers = _own_mixers(path)
    report = check_program(loaded)
    for mixer in mixers:
        key = kernel_key(mixer, model.d_model)
        verdicts = support.fast_paths(key)
        plan = PathChooser(key, mixer.name).plan("cuda")
        warned = {d.code for d in report.diagnostics if d.code in ("W002", "W003") and d.subject == mixer.name}
        if any(v.ok for v in verdicts):
            assert not warned, (mixer.name, warned)
            ops = {v.op for v in verdicts if v.ok}
            assert plan.op in ops or plan.backend is BackendName.REFERENCE and plan.reason, plan
        else:
            assert plan.op.startswith("reference")
            assert all(v.reason in plan.reason for v in verdicts), (plan.reason, verdicts)
            assert warned, mixer.name


# --- mamba-ssm ---------------------------------------------------------------------------------------


def _library_key(name: str):
    loaded, model, mixers = _own_mixers(SPECS_DIR / f"{name}.seq")
    return kernel_key(mixers[0], model.d_model)


@pytest.mark.parametrize("name", ["mamba2", "mamba2_no_decay", "mamba2_no_conv", "mamba2_no_groupnorm",
                                  "mamba2_rope", "mamba2_alibi", "retnet"])
def test_mamba_ssd_takes_mamba2_its_ablations_and_retnet(name):
    assert support.mamba(_library_key(name)) == support.Support("mamba", "mamba.ssd")


def test_mamba_selective_scan_takes_mamba1():
    assert support.mamba(_library_key("mamba")) == support.Support("mamba", "mamba.selective_scan")


def test_a_free_per_entry_decay_of_width_one_heads_is_told_to_say_selective():
    mixer = nodes.Mixer(name="m", weights=nodes.Linear(), heads=8, head_dim=1, key_dim=16, qk_groups=1,
                        decay=VECTOR)
    verdict = support.mamba(kernel_key(mixer, 64))
    assert not verdict.ok and "data_dependent(selective)" in verdict.reason


@pytest.mark.parametrize("name, why", [
    ("gla", "vector"),
    ("gated_deltanet", "delta"),
    ("deltanet", "delta"),
    ("rwkv6", "bonus"),
    ("rwkv7", "rwkv7"),
    ("linear_attention", "normalized_linear"),
    ("transformer", "recurrent"),
])
def test_mamba_table_names_what_rules_a_mixer_out(name, why):
    verdict = support.mamba(_library_key(name))
    assert not verdict.ok and why in verdict.reason


def test_mamba_is_preferred_where_both_recurrent_backends_apply():
    verdicts = support.fast_paths(_library_key("mamba2"))
    assert [(v.backend, v.op) for v in verdicts] == [("mamba", "mamba.ssd"), ("fla", "fla.chunk_simple_gla"),
                                                      ("triton", None)]
    assert "closed form" in verdicts[2].reason  # the additive rules have no walk to put in a kernel


@pytest.mark.parametrize("name, fla_op", [("gated_deltanet", "fla.chunk_gated_delta_rule"),
                                          ("deltanet", "fla.chunk_delta_rule")])
def test_delta_rules_are_offered_to_fla_and_the_state_passing_kernel(name, fla_op):
    """Both offers stand; the planner self-checks each and races them where both pass (on
    Hopper with Triton 3.6 fla refuses its gated backward, and the kernel runs alone)."""
    ops = [v.op for v in support.fast_paths(_library_key(name))]
    assert ops == [None, fla_op, "triton.delta_chunk"]


@pytest.mark.parametrize("name, why", [("rwkv7", "delta rule only"), ("rwkv6", "closed form"),
                                       ("gla", "closed form"), ("mamba2", "closed form")])
def test_state_passing_kernel_table_names_what_rules_a_mixer_out(name, why):
    verdict = support.triton_recurrent(_library_key(name))
    assert not verdict.ok and why in verdict.reason


def test_the_generated_kernels_table_still_refuses_the_recurrent_family():
    """codegen renders what `support.triton` admits: the state-passing kernel is not generated."""
    assert not support.triton(_library_key("gated_deltanet")).ok


def test_state_passing_kernel_takes_whole_tiles_only():
    _, model, mixers = _own_mixers(SPECS_DIR / "gated_deltanet.seq")
    verdict = support.triton_recurrent(kernel_key(mixers[0].model_copy(update={"head_dim": 48, "heads": 16}),
                                                  model.d_model))
    assert not verdict.ok and "width 48" in verdict.reason and verdict.slot == ("head_dim",)
