"""The MixerPlan is what the lowering builds: its dense layers are the module's, and its
initialisation recipe is the one each library architecture's reference uses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqdsl.ir.plan import mixer_plan
from seqdsl.lower.lm import LanguageModel
from tests.spec_library import SPEC_FILES, SPEC_IDS, spec_model


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_the_modules_dense_layers_are_the_plans(path):
    program, model = spec_model(path)
    with torch.device("meta"):
        lm = LanguageModel(program, model)
    for block in lm.blocks:
        plan = mixer_plan(block.mixer.spec, model.d_model)
        built = {name: (m.in_features, m.out_features, m.bias is not None)
                 for name, m in block.mixer.named_children() if isinstance(m, nn.Linear)}
        assert built == {p.name: (p.inputs, p.outputs, p.bias) for p in plan.linears}


# a library file (its first mixer) and the reference its decay and update say initialises it
RECIPES = {"mamba2": "mamba2", "gated_deltanet": "gated_deltanet", "mamba": "mamba1", "gla": "gla",
           "rwkv6": "rwkv6", "rwkv7": "rwkv7", "retnet": "fixed", "deltanet": "none", "transformer": "none"}


@pytest.mark.parametrize("name, recipe", RECIPES.items())
def test_each_architecture_gets_its_references_initialisation(name, recipe):
    program, model = spec_model(next(p for p in SPEC_FILES if p.stem == name))
    assert mixer_plan(program.mixer(model.mixer[0]), model.d_model).init == recipe
