"""Hypothesis profiles for the whole suite.

    ci         (the default) a few dozen examples per property: the fast suite stays within a
               minute on 2 cores. Every run draws fresh examples, so CI keeps exploring over runs.
    thorough   hundreds of examples per property, for a deliberate search:
               HYPOTHESIS_PROFILE=thorough python3 -m pytest tests/language
               (or `--hypothesis-profile thorough`).

Properties whose examples are cheap keep their own, larger `max_examples`; the others take the
profile's count.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=25, deadline=None)
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
