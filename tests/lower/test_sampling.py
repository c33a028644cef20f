"""Each sampling parameter of `LanguageModel.generate` changes the sampled tokens as it should,
and `seqdsl.generate_text` passes each one on.

The parameters are read from the signatures (their keyword-only arguments): one that no test
here covers fails `test_every_sampling_parameter_has_a_test`. The expected distributions are
computed by hand, in float64, from the model's own next-token logits; sampling draws from a
seeded generator, so every count below is the same on every run.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import seqdsl
from seqdsl.lower.lm import LanguageModel, build_lm

SPEC = """
mixer attn { heads = 2  head_dim = 16  position = rope }
model lm { layers = 1  d_model = 32  vocab = 16  mixer = attn }
"""
PROMPT = torch.tensor([[3, 1, 4, 1]])
DRAWS = 20_000  # rows sampled at once: the frequencies' total-variation noise is about 0.01
NOISE = 0.03  # total variation allowed between the sampled frequencies and their distribution

# keyword-only parameter of generate -> the test that shows what it does
COVERED = {
    "temperature": ("test_temperature_samples_softmax_of_logits_over_temperature",
                    "test_temperature_towards_zero_is_greedy"),
    "generator": ("test_the_generator_alone_decides_the_draws",),
}


def _sharp(lm: LanguageModel, factor: float) -> LanguageModel:
    """`lm` with its output head scaled by `factor`: logits spread over several nats, so that a
    temperature visibly reshapes them (an untrained head's logits are all near zero)."""
    with torch.no_grad():
        lm.head.weight.mul_(factor)
    return lm


@pytest.fixture(scope="module")
def lm() -> LanguageModel:
    torch.manual_seed(0)
    return _sharp(LanguageModel(*_program_and_model()), 5.0).eval()


def _program_and_model():
    program = seqdsl.loads(SPEC).program
    return program, program.model("lm")


def _next_token_probs(lm: LanguageModel, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) of the token after PROMPT, by hand in float64."""
    with torch.no_grad():
        logits, _ = lm(PROMPT)
    z = logits[0, -1].double() / temperature
    e = (z - z.max()).exp()
    return e / e.sum()


def _sampled_frequencies(lm: LanguageModel, **sampling) -> torch.Tensor:
    first = lm.generate(PROMPT.expand(DRAWS, -1), 1, **sampling)[:, -1]
    return torch.bincount(first, minlength=lm.spec.vocab).double() / DRAWS


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * (p - q).abs().sum().item()


def test_every_sampling_parameter_has_a_test():
    def keyword_only(fn):
        return {name for name, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}

    assert keyword_only(LanguageModel.generate) == set(COVERED), \
        "a sampling parameter of generate without a test here (or a test for one that is gone)"
    assert keyword_only(seqdsl.generate_text) == set(COVERED), "generate_text passes on every one"
    tests = {name for name in globals() if name.startswith("test_")}
    assert {t for found in COVERED.values() for t in found} <= tests


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_samples_softmax_of_logits_over_temperature(lm, temperature):
    want = _next_token_probs(lm, temperature)
    # the temperature must matter here by far more than the sampling noise
    assert _tv(want, _next_token_probs(lm, 1.0)) > 4 * NOISE
    got = _sampled_frequencies(lm, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert _tv(got, want) < NOISE, (got, want)


def test_temperature_towards_zero_is_greedy(lm):
    """A temperature of 1e-3 turns every logit gap of this model (at least 0.05 here, checked)
    into odds past e^50: the draws are the greedy continuation, step after step."""
    prompts = torch.randint(0, 16, (64, 3), generator=torch.Generator().manual_seed(1))
    greedy = lm.generate(prompts, 6)
    with torch.no_grad():
        logits, _ = lm(greedy[:, :-1])
    top2 = logits[:, prompts.shape[1] - 1:].topk(2, dim=-1).values
    assert (top2[..., 0] - top2[..., 1]).min() > 0.05, "a near-tie: choose other prompts"
    cold = lm.generate(prompts, 6, temperature=1e-3, generator=torch.Generator().manual_seed(2))
    assert torch.equal(cold, greedy)
    warm = lm.generate(prompts, 6, temperature=1.0, generator=torch.Generator().manual_seed(2))
    assert not torch.equal(warm, greedy), "at temperature 1 this model's draws differ from greedy"


def test_the_generator_alone_decides_the_draws(lm):
    """The same seeded generator draws the same tokens whatever the global RNG did in between;
    another seed draws others."""
    def draws(seed, global_seed):
        torch.manual_seed(global_seed)
        return lm.generate(PROMPT.expand(32, -1), 4, temperature=1.0, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draws(0, global_seed=1), draws(0, global_seed=2))
    assert not torch.equal(draws(0, global_seed=1), draws(1, global_seed=1))


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_generate_text_passes_each_sampling_parameter_on(temperature):
    """generate_text on a byte-level model samples what generate samples, with the same
    temperature and generator (a dropped one would draw greedily, or from the global RNG)."""
    torch.manual_seed(0)
    text_lm = _sharp(build_lm(seqdsl.loads('mixer attn { position = rope }\nmodel m { preset = "tiny"  mixer = attn }\n')
                              .program), 2.0).eval()
    prompt = "def "
    tokens = torch.tensor([list(prompt.encode())])
    want = text_lm.generate(tokens, 12, temperature=temperature, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(99)  # the global RNG moved: only the generator may decide
    got = seqdsl.generate_text(text_lm, prompt, 12, temperature=temperature,
                               generator=torch.Generator().manual_seed(5))
    assert got == bytes(want[0, tokens.shape[1]:].tolist()).decode("utf-8", errors="replace")
    if temperature > 0:
        greedy = text_lm.generate(tokens, 12)
        assert not torch.equal(want, greedy), "sampling at this temperature must differ from greedy here"
