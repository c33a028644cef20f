"""Each rule on small specs: when it fires, where it points, what it says; and the verdict
logic (pillars, severities, --select/--ignore, hybrids). Random valid mixers never crash the
checker and always get a span for every finding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl import SeqError, loads
from seqdsl.check import RULES, active_rules, check_program, lookup
from seqdsl.check.visibility import alibi_slopes
from seqdsl.ir import nodes

MODEL = '\nmodel lm {\n    preset = "110m"\n    mixer = m\n}\n'


def check(body: str, model: bool = True, **kw):
    text = "mixer m {\n" + body + "\n}\n" + (MODEL if model else "")
    return check_program(loads(text, "t.seq"), **kw)


def codes(report) -> set[str]:
    return {d.code for d in report.diagnostics}


def only(report, code):
    (d,) = [d for d in report.diagnostics if d.code == code]
    return d


def test_rule_metadata_is_complete():
    assert len(RULES) >= 15
    for r in RULES.values():
        assert r.code[0] == r.pillar and r.severity in ("error", "warning", "info")
        assert "Why:" in r.doc and "Paper:" in r.doc and "Fix:" in r.doc, r.code
    assert lookup("v001").name == "finite-window" and lookup("finite-window").code == "V001"


def test_window_points_at_its_size_and_states_the_fraction():
    d = only(check("    visibility = window(512)"), "V001")
    assert (d.span.line, d.span.column, d.span.end_column) == (2, 25, 28)
    assert "25% of the 2048-token context (model lm)" in d.message
    assert check("    visibility = window(2048)").verdict == "pass"


def test_context_without_a_model_is_the_papers():
    d = only(check("    visibility = window(256)", model=False), "V001")
    assert "2048-token context (the paper's; no model uses this mixer)" in d.message


def test_context_is_the_shortest_model_using_the_mixer():
    text = ("mixer m { visibility = window(1024) }\n"
            "model a { preset = \"110m\" mixer = m context = 4096 }\n"
            "model b { preset = \"110m\" mixer = m context = 512 }\n")
    report = check_program(loads(text))
    assert report.verdict == "pass" and report.mixers == {"m": "pass"}
    report = check_program(loads(text.replace("512", "2000")))
    assert "2000-token context (model b)" in only(report, "V001").message


def test_chunk_local_fails_visibility():
    assert codes(check("    visibility = chunk_local(128)")) == {"V002"}


@pytest.mark.parametrize("size", [256, 2047, 2048, 4096])
@pytest.mark.parametrize("context", [None, 2048, 4096])
def test_window_and_chunk_local_agree_at_the_context(size, context):
    """Issue 9.5: a chunk as long as the context lets every token see its whole prefix, as a
    window of that length does; chunk_local(2048) at 2048 used to fail."""
    window = check(f"    visibility = window({size})", context=context)
    chunk = check(f"    visibility = chunk_local({size})", context=context)
    assert window.verdict == chunk.verdict
    assert window.verdict == ("pass" if size >= (context or 2048) else "fail")


def test_constant_decay_names_its_horizon():
    d = only(check("    decay = constant(gamma=0.99)"), "V003")
    # the horizon is 1/|ln gamma| (ALiBi's 1/slope), no longer 1/(1-gamma) = 100
    assert "horizon of 1/|ln gamma| = 99.5 tokens" in d.message
    assert d.span.column == 28  # the gamma argument


def test_retnet_schedule_with_unknown_heads_says_so():
    d = only(check("    decay = constant", model=False), "V003")
    assert "not known" in d.message and "31.5 for head 0" in d.message
    assert "at least 7 heads" in d.message  # 2^(5+6) = 2048
    # it cannot be shown to reach the context: judged as a short horizon under softmax
    assert d.severity == "warning"


def test_retnet_schedule_longer_than_context():
    d = only(check("    heads = 12\n    decay = constant"), "V003")
    assert "to 65,535 tokens (6 of 12 heads forget within the context)" in d.message
    assert "the horizon covers the 2048-token context" in d.message and d.severity == "info"


def test_data_dependent_decay_is_explained_not_failed():
    d = only(check("    decay = data_dependent(vector)\n    weights = linear"), "V003")
    assert d.severity == "info" and "input-dependent" in d.message
    assert "convergence speed, not base capability" in d.message and "V004" in d.message


def test_decay_with_softmax_is_a_learned_recency_bias():
    report = check("    decay = data_dependent(scalar)")
    assert codes(report) == {"V003"} and report.verdict == "pass"
    assert "Forgetting Transformer" in only(report, "V003").message


def test_recurrent_state_size():
    d = only(check("    expand = 2\n    key_dim = 128\n    weights = linear"), "V004")
    assert "128 x 64 state per head (8,192 numbers; 24 heads: 196,608 per layer)" in d.message


def test_alibi_slopes_match_the_reference_code():
    assert alibi_slopes(8) == [2.0 ** -(i + 1) for i in range(8)]
    assert len(alibi_slopes(12)) == 12 and min(alibi_slopes(12)) == 2.0 ** -8


@pytest.mark.parametrize("relation,expected", [
    ("random_keys", {"R001"}), ("random_keys(seed=3)", {"R001"}), ("const_keys", {"R001", "N003"}),
    ("positional", {"R002"}), ("dot(scale=0.0)", {"N003"}), ("dot(qk_norm=true)", set()),
])
def test_relations(relation, expected):
    assert codes(check(f"    relation = {relation}")) == expected


def test_selection_rules():
    assert codes(check("    select = top(1, over=chunk(128), score=mean)")) == {"R003"}
    assert "R003" in codes(check("    select = top(1, over=chunk(2), score=mean)"))
    # lse scores: no principle finding, and a generated kernel (the top-k chunk kernels, k = 1
    # included), so no speed warning either
    assert codes(check("    select = top(1, over=chunk(128), score=lse)")) == set()
    d = only(check("    select = top(1, grad=none)"), "R004")
    assert d.severity == "warning" and d.span.column == 26
    assert only(check("    select = top(4, grad=none)"), "R004").severity == "info"


def test_mean_over_chunks_of_one_key_is_exact():
    """Issue 8.5: with one key per chunk the mean key is the key (W002 only notes the speed)."""
    report = check("    select = top(1, over=chunk(1), score=mean)")
    assert "R003" not in codes(report) and report.verdict == "pass"


def test_long_chunks_warn_only_where_the_kernels_cannot_split_them():
    """MoBA's 512-token chunks (110m at 8K): top-k by mean keys without gradient is split in
    tiles by the generated kernels, so W002 is silent; with the STE it runs on the reference."""
    moba = "    select = top(3, over=chunk(512), score=mean, grad=none)"
    assert "W002" not in codes(check(moba, context=8192))
    ste = only(check("    select = top(3, over=chunk(512), score=mean)", context=8192), "W002")
    assert "longer than one tile" in ste.message and "reference (PyTorch) path" in ste.message


def test_temperature_grades():
    assert check("    weights = softmax(temperature=0.25)").verdict == "pass"
    assert check("    weights = softmax(temperature=1.0)").verdict == "pass"
    d = only(check("    weights = softmax(temperature=1.5)"), "N002")
    assert d.span.column == 35 and d.severity == "warning"


@pytest.mark.parametrize("body,fragment", [
    ("    weights = linear\n    select = top(1)", "select = top"),
    ("    update = delta", "update = delta"),
    ("    update = additive(bonus=true)", "bonus=true"),
    ("    relation = dot(feature=elu1)", "feature map `elu1`"),
    ("    relation = dot(feature=identity)\n    weights = normalized_linear", "can be negative"),
    ("    visibility = chunk_local(128)\n    select = top(1, over=chunk(128))", "chunk selection defines which keys are visible"),
])
def test_conflicting_choices(body, fragment):
    report = check(body)
    assert report.verdict == "fail"
    assert any(fragment in d.message for d in report.diagnostics if d.code == "W001")


def test_backend_warnings_do_not_degrade():
    report = check("    head_dim = 96\n    select = top(1, over=chunk(100))")
    # M004: no preset can halve 96 into tiny's or 1.3b's width, a warning that does not degrade either
    assert codes(report) == {"W002", "W003", "W004", "M004"} and report.verdict == "pass"
    assert only(report, "W004").severity == "info"
    assert "reference (PyTorch) path" in only(report, "W002").message


def test_inert_parameters():
    report = check("    select = top(1, score=mean, local=false, grad=none, value_grad=soft)")
    assert [d.code for d in report.diagnostics].count("W005") == 3
    sunk = check("    select = top(1, sink=4)")  # element selection writes its sinks in the window
    assert [d.code for d in sunk.diagnostics].count("W005") == 1
    assert "W005" not in codes(check("    select = top(1, over=chunk(64), sink=4)"))
    # share = group: chunks only, and only where heads share a key/value head
    assert [d.code for d in check("    kv_groups = 1\n    select = top(2, share=group)").diagnostics].count("W005") == 1
    alone = check("    select = top(2, over=chunk(64), share=group)")
    assert "each group is one head" in only(alone, "W005").message
    grouped = check("    kv_groups = 2\n    select = top(2, over=chunk(64), share=group)")
    assert "W005" not in codes(grouped)
    # the generated kernels rank per head: the reference runs it, and the checker says why
    assert "chunks chosen per key/value group" in only(grouped, "W003").message


def test_chunk_selection_sinks_count_among_the_forward_keys():
    from seqdsl.check.sharpness import forward_keys

    mixer = lambda **kw: nodes.Mixer(name="m", select=nodes.Top(k=2, over=nodes.Chunk(size=64), **kw))
    assert forward_keys(mixer(), 2048) == 3 * 64
    assert forward_keys(mixer(sink=4), 2048) == 3 * 64 + 4
    assert forward_keys(mixer(sink=4), 100) == 100  # never more than the visible keys


def test_head_layout_is_a_model_error():
    report = check("    head_dim = 100")
    assert report.models == {"lm": "fail"} and report.mixers == {"m": "pass"}
    assert "M003" in codes(report)


def test_select_and_ignore_change_verdicts():
    body = "    weights = softmax(temperature=2.0)\n    visibility = window(64)"
    assert check(body).verdict == "fail"
    assert check(body, ignore=["V"]).verdict == "degraded"
    assert check(body, ignore=["V001", "flattened-softmax"]).verdict == "pass"
    assert codes(check(body, select=["N00"])) == {"N002"}
    assert [r.code for r in active_rules(["V00"], ["V002"])] == ["V001", "V003", "V004", "V005"]
    with pytest.raises(SeqError, match="matches no rule"):
        active_rules(["X9"])


def test_file_verdict_follows_its_models(tmp_path):
    """Issue 8.8: a hybrid declared with its mixers is as degraded as one importing them; a
    mixer no model uses still counts on its own."""
    mixers = "mixer a {}\nmixer f { weights = linear }\n"
    hybrid = 'model h { preset = "110m" mixer = [a, f] }\n'
    (tmp_path / "mixers.seq").write_text(mixers)
    (tmp_path / "imports.seq").write_text('import "mixers.seq"\n' + hybrid)
    (tmp_path / "declares.seq").write_text(mixers + hybrid)
    from seqdsl import load

    imported = check_program(load(tmp_path / "imports.seq"))
    declared = check_program(load(tmp_path / "declares.seq"))
    assert imported.verdict == declared.verdict == "degraded"
    assert declared.mixers == {"a": "pass", "f": "fail"} and declared.models == {"h": "degraded"}
    unused = check_program(loads(mixers + "mixer x { visibility = window(8) }\n" + hybrid))
    assert unused.verdict == "fail" and unused.models == {"h": "degraded"}


def test_hybrid_verdicts():
    text = ("mixer a {}\nmixer s { weights = softmax(temperature=3.0) }\nmixer f { weights = linear }\n"
            "model pf { preset = \"110m\" mixer = [a, f] }\n"
            "model sf { preset = \"110m\" mixer = [s, f] }\n"
            "model aa { preset = \"110m\" mixer = [a, a] }\n")
    report = check_program(loads(text))
    assert report.models == {"pf": "degraded", "sf": "fail", "aa": "pass"}
    assert check_program(loads(text), ignore=["M001"]).models["pf"] == "fail"


# --- random valid mixers never crash the checker --------------------------------------------------

SLOTS = {
    "heads": ["auto", "1", "12"], "head_dim": ["1", "64", "96"], "expand": ["1", "2"],
    "key_dim": ["auto", "16"],
    "position": ["none", "rope", "alibi"],
    "relation": ["dot", "dot(scale=0.0)", "dot(feature=taylor)", "dot(feature=relu)", "random_keys",
                 "const_keys", "positional"],
    "visibility": ["full", "window(1)", "window(4096)", "chunk_local(100)"],
    "weights": ["softmax", "softmax(temperature=3.0)", "linear", "normalized_linear"],
    "select": ["none", "top(1)", "top(2, over=chunk(64), score=mean, grad=none)", "top(1, local=false)"],
    "decay": ["none", "constant", "constant(gamma=0.5)", "data_dependent(vector)"],
    "update": ["additive", "additive(bonus=true)", "delta", "rwkv7"],
    "conv": ["none", "causal(4)", "token_shift"],
    "norm": ["none", "groupnorm"], "gate": ["none", "sigmoid"],
}


@st.composite
def spec_text(draw):
    slots = draw(st.lists(st.sampled_from(sorted(SLOTS)), unique=True))
    body = "\n".join(f"    {s} = {draw(st.sampled_from(SLOTS[s]))}" for s in slots)
    context = draw(st.sampled_from([1, 100, 2048]))
    model = draw(st.booleans())
    tail = f'model lm {{ preset = "tiny" mixer = m context = {context} }}\n' if model else ""
    return "mixer m {\n" + body + "\n}\n" + tail


@settings(max_examples=150, deadline=None)
@given(spec_text())
def test_checker_is_total_on_valid_specs(text):
    report = check_program(loads(text, "t.seq"))
    assert report.verdict in ("pass", "degraded", "fail")
    for d in report.diagnostics:
        assert d.span is not None and d.span.file == "t.seq" and d.message and d.fix
    errors = any(d.severity == "error" and d.pillar != "M" for d in report.diagnostics)
    assert (report.mixers["m"] == "fail") == errors


# --- issue 20.9: W003's caret and fix; dense attention in disguise ---------------------------------


def test_no_fast_path_points_at_what_rules_the_backend_out():
    """W003 used to point at `head_dim = 64` and suggest `head_dim = 64` whatever the cause; top-k
    elements up to 64 are generated, with the (default) STE or without, top-65 is not (the caret
    on its k); top-2 chunks are generated, with the STE gate or without; top-17 chunks are not."""
    assert "W003" not in codes(check("    head_dim = 64\n    select = top(2)"))
    assert "W003" not in codes(check("    head_dim = 64\n    select = top(2, grad=none)"))
    d = only(check("    head_dim = 64\n    select = top(65, grad=none)"), "W003")
    assert (d.span.line, d.span.column, d.span.end_column) == (3, 18, 20)  # the `65` of top(65)
    assert "at most 64" in d.message and d.fix == "`k` of at most 64"
    assert "W003" not in codes(check("    select = top(2, over=chunk(128))"))
    assert "W003" not in codes(check("    select = top(2, over=chunk(128), grad=none)"))
    d = only(check("    select = top(17, over=chunk(64))"), "W003")
    assert "at most 16" in d.message and d.fix == "`k` of at most 16"
    # a width the kernels do not take: the caret on head_dim, the fix a width they take
    d = only(check("    head_dim = 96\n    select = top(1)"), "W003")
    assert (d.span.line, d.span.column) == (2, 5) and "key width 96" in d.message
    assert "`head_dim = 64`" in d.fix
    # lse chunk scores are generated (on the top-k chunk kernels, k = 1 included); past one tile,
    # only mean scores are split into tiles: a tiling warning, the caret on the chunk size
    assert not codes(check("    select = top(1, over=chunk(128), score=lse)")) & {"W002", "W003"}
    d = only(check("    select = top(3, over=chunk(256), score=lse, grad=none)"), "W002")
    assert d.span.line_text[d.span.column - 1:d.span.end_column - 1] == "256" and "longer than one tile" in d.message


@pytest.mark.parametrize("body, reason, caret", [
    ("    visibility = window(4096)", "window(4096) covers the 2048-token context", "4096"),
    ("    select = top(1, over=chunk(4096))", "chunk(4096) covers the 2048-token context", "4096"),
    ("    select = top(2048)", "top(2048) keeps every key of the 2048-token context", "2048"),
    # k chunks plus the local one span the context: 15 x 128 earlier + the own chunk = 2048
    ("    select = top(15, over=chunk(128))", "top(15, over=chunk(128)) selects every chunk", "15"),
])
def test_a_restriction_covering_the_context_is_dense_attention(body, reason, caret):
    """Issue 20.9: window(4096) at a 2048 context was planned on sdpa.mask and chunk(4096) on the
    reference, with W002/W003 speed warnings; both are causal softmax attention. W006 says so
    (an info), and the speed warnings, which the planner no longer meets, are gone."""
    report = check(body)
    assert codes(report) == {"W006"} and report.verdict == "pass"
    d = only(report, "W006")
    assert d.severity == "info" and reason in d.message and "SDPA" in d.message
    assert d.span.line_text[d.span.column - 1:d.span.end_column - 1] == caret


def test_a_restriction_one_token_short_of_the_context_is_not_dense():
    """The boundaries, by hand: a window of 2047 hides token 0 from token 2047; top-2047 drops
    one of 2048 keys; 14 earlier chunks of 128 + the own one reach 1920 tokens, not 2048."""
    assert "W006" not in codes(check("    visibility = window(2047)"))
    assert "W006" not in codes(check("    select = top(2047)"))
    assert "W006" not in codes(check("    select = top(14, over=chunk(128))"))
    # without `local` the own chunk is a candidate too: 16 chunks of 128 need k = 16
    assert "W006" not in codes(check("    select = top(15, over=chunk(128), local=false)"))
    assert "W006" in codes(check("    select = top(16, over=chunk(128), local=false)"))


def test_a_model_no_preset_can_resize_is_told_at_check_time():
    """Issue 20.2: a head_dim-96 DeltaNet (8 heads at 768) cannot be resized to tiny (128 wide)
    or 1.3b (2048): no halving of 96 divides either. `check` said nothing; M004 says it, at the
    head_dim, without changing the verdict."""
    report = check("    head_dim = 96\n    relation = dot(qk_norm=true)\n    weights = linear\n    update = delta")
    found = [d for d in report.diagnostics if d.code == "M004"]
    assert [d.message.split(":")[0] for d in found] == ["preset tiny", "preset 1.3b"]
    assert all(d.severity == "warning" and (d.span.line, d.span.column) == (2, 5) for d in found)
    assert "no halving of head_dim 96 divides 128" in found[0].message
    assert report.verdict == "fail" and report.models == {"lm": "fail"}  # V004/N001, as before
    assert "M004" not in codes(check("    head_dim = 64\n    weights = linear"))


# --- W007: a conv longer than the Triton kernel takes ---------------------------------------------------


def test_a_conv_longer_than_the_kernel_takes_is_a_speed_warning_at_its_size():
    assert "W007" not in codes(check("    conv = causal(4)"))
    assert "W007" not in codes(check("    conv = causal(16)"))
    d = only(check("    conv = causal(17)"), "W007")
    assert "17 taps" in d.message and "reference taps" in d.message and d.severity == "warning"
    assert "causal(16)" in d.fix
    assert d.span.line_text[d.span.column - 1:d.span.end_column - 1] == "17", d.span  # the caret under the size
