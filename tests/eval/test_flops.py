"""FLOPs per token from the IR: the dense layers against the lowered model's real weights, the
transformer against 6N + 12 L d T, and the mixers' real work (window, Top-1, recurrent)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import seqdsl
from seqdsl.ir import nodes
from seqdsl.ir.flops import (
    flops_per_token, mfu, mixing_flops, mlp_weights, peak_bf16_flops, projection_weights)
from seqdsl.ir.key import kernel_key
from seqdsl.ir.plan import mixer_plan
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel
from tests.spec_library import SPEC_FILES, SPEC_IDS, spec_model


def linear_weights(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def library_model(name: str, preset: str = "110m") -> tuple[nodes.Program, nodes.Model]:
    program = seqdsl.load(f"specs/{name}.seq").program
    resized = model_at(program, preset=preset)
    return resized.program, resized.model


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_counted_dense_weights_are_the_lowered_model_weights(path):
    program, model = spec_model(path)
    with torch.device("meta"):
        lm = LanguageModel(program, model)
    for block in lm.blocks:
        assert projection_weights(mixer_plan(block.mixer.spec, model.d_model)) == linear_weights(block.mixer)
        assert mlp_weights(model) == (linear_weights(block.mlp) if block.mlp is not None else 0)
    count = flops_per_token(program, model, 256)
    assert count.training > count.forward > 0


@pytest.mark.parametrize("convention, attention_factor", [("dense", 12), ("causal", 6)])
def test_transformer_matches_6N_plus_attention_term(convention, attention_factor):
    program, model = library_model("transformer")
    with torch.device("meta"):
        n_params = LanguageModel(program, model).num_parameters()  # tied: the embedding is the head
    T, L, d = 2048, model.layers, model.d_model
    expected = 6 * n_params + attention_factor * L * d * T
    got = flops_per_token(program, model, T, convention=convention).training
    assert abs(got - expected) / expected < 0.01


def _key(mixer_text: str, d_model: int = 768):
    mixer = seqdsl.loads(mixer_text).program.mixers[-1]
    return kernel_key(mixer, d_model)


DENSE = "mixer m { heads = 12  head_dim = 64  position = rope }"


@pytest.mark.parametrize("window, T", [(256, 8192), (256, 2048), (4096, 2048), (2048, 2048)])
def test_window_counts_min_of_window_and_context(window, T):
    key = _key(f"mixer m {{ heads = 12  head_dim = 64  visibility = window({window}) }}")
    per_key = 2 * 12 * (64 + 64)  # scores + weighted values, all heads
    assert mixing_flops(key, T, "dense").forward == per_key * min(window, T)
    # causal: query i sees min(i + 1, w) keys
    mean_visible = sum(min(i + 1, window) for i in range(T)) / T
    assert mixing_flops(key, T, "causal").forward == pytest.approx(per_key * mean_visible, rel=1e-12)
    if window >= T:
        assert mixing_flops(key, T, "causal") == mixing_flops(_key(DENSE), T, "causal")


def test_dense_causal_attention_is_half_of_the_square():
    key = _key(DENSE)
    T = 8192
    causal, dense = mixing_flops(key, T, "causal"), mixing_flops(key, T, "dense")
    assert causal.forward == pytest.approx(dense.forward * (T + 1) / (2 * T), rel=1e-12)
    assert causal.training == pytest.approx(3 * causal.forward, rel=1e-12)


TOP1_CHUNK = "mixer m {{ heads = 12  head_dim = 64  select = top(1, over=chunk(128), score={score}) }}"


def test_top1_chunk_approx_counts_far_less_than_dense_at_8k():
    T = 8192
    dense = mixing_flops(_key(DENSE), T)
    approx = mixing_flops(_key(TOP1_CHUNK.format(score="mean")), T)
    exact = mixing_flops(_key(TOP1_CHUNK.format(score="max")), T)
    # Approx: T/128 mean keys scored, then at most two chunks attended
    assert approx.training < dense.training / 10
    # Exact scans every earlier key's score (no values), so it sits between the two
    assert approx.forward < exact.forward < dense.forward
    assert exact.forward > 0.5 * dense.forward * 0.9


def test_top1_element_scans_every_key_but_mixes_one_value():
    T = 2048
    dense = mixing_flops(_key(DENSE), T)
    top1 = mixing_flops(_key("mixer m { heads = 12  head_dim = 64  select = top(1) }"), T)
    scores_only = dense.forward / 2  # identity features: F = Dk = Dv, so scores are half
    assert top1.forward == pytest.approx(scores_only + 2 * 12 * 64, rel=1e-12)
    # the straight-through backward is dense attention's backward over the visible keys
    assert top1.backward == pytest.approx(dense.backward, rel=1e-12)
    no_grad = mixing_flops(_key("mixer m { heads = 12  head_dim = 64  select = top(1, grad=none) }"), T)
    assert no_grad.backward < dense.backward / 100


@pytest.mark.parametrize("spec", ["gla", "mamba2", "gated_deltanet", "rwkv7", "based", "retnet"])
def test_recurrent_mixing_does_not_grow_with_context(spec):
    program, model = library_model(spec)
    key = kernel_key(program.mixer(model.mixer[0]), model.d_model)
    assert key.family == "recurrent"
    assert mixing_flops(key, 2048) == mixing_flops(key, 65536)


def test_delta_rule_costs_more_than_additive_at_the_same_shape():
    additive = _key("mixer m { heads = 12  head_dim = 64  weights = linear }")
    delta = _key("mixer m { heads = 12  head_dim = 64  weights = linear  update = delta }")
    assert mixing_flops(delta, 2048).forward > mixing_flops(additive, 2048).forward


def test_unknown_convention_is_refused():
    with pytest.raises(ValueError, match="convention"):
        mixing_flops(_key(DENSE), 128, "square")


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("cpu", None),
])
def test_peak_table_matches_device_names(name, peak):
    assert peak_bf16_flops(name) == peak


def test_mfu_is_achieved_over_peak():
    assert mfu(200_000, 8.5e8, 989e12) == pytest.approx(200_000 * 8.5e8 / 989e12)
    with pytest.raises(ValueError):
        mfu(1.0, 1.0, 0.0)


def test_measured_gemm_rate_is_a_positive_rate_and_feeds_mfu():
    from seqdsl.eval.gemm import measure_gemm_rate

    rate = measure_gemm_rate("cpu", dtype=torch.float32, n=32, repeats=2, warmup=1)
    assert rate > 0 and rate != float("inf")
    assert mfu(1.0, rate, rate) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        measure_gemm_rate("cpu", n=0)


def test_positional_relation_is_charged_for_the_value_mix_only():
    positional = _key("mixer m { heads = 12  head_dim = 64  relation = positional }")
    dense = mixing_flops(_key(DENSE), 1024).forward
    assert mixing_flops(positional, 1024).forward == pytest.approx(dense / 2, rel=1e-12)


@pytest.mark.parametrize("groups", ["qk_groups = 2", "kv_groups = 2", "kv_groups = 1"])
def test_counted_weights_follow_shared_projections(groups):
    program = seqdsl.loads(f"mixer m {{ heads = 4  head_dim = 16  {groups} }}\n"
                           "model lm { layers = 1  d_model = 64  vocab = 32  mixer = m }").program
    model = program.model("lm")
    with torch.device("meta"):
        lm = LanguageModel(program, model)
    assert projection_weights(mixer_plan(program.mixer("m"), 64)) == linear_weights(lm.blocks[0].mixer)
