"""Several training domains are interleaved in proportion to their size (seqdsl/data/mixing.py),
never laid one after another: a mixed-domain run must see the mix from its first steps on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.data.documents import Document
from seqdsl.data.mixing import mixed_order
from seqdsl.data.packing import PackedSequences
from seqdsl.data.tokencache import CachedSequences, open_cache
from seqdsl.data.tokenizer import ByteTokenizer
from tests.data.sources import MemorySource


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 500)), min_size=1, max_size=60))
def test_the_order_keeps_each_domain_in_order_and_every_prefix_near_the_proportions(pieces):
    domains = np.array([d for d, _ in pieces])
    sizes = np.array([s for _, s in pieces])
    order = mixed_order(domains, sizes)
    assert sorted(order.tolist()) == list(range(len(pieces)))
    for d in set(domains.tolist()):
        mine = [i for i in order.tolist() if domains[i] == d]
        assert mine == sorted(mine), "a domain's pieces keep the source's order"
    # after any prefix, every domain has given the same share of its bytes as the others, up to
    # one piece of each: the mix of any stretch is the domains' proportions
    total = {d: sizes[domains == d].sum() for d in set(domains.tolist())}
    given_ = dict.fromkeys(total, 0)
    for i in order.tolist():
        given_[domains[i]] += sizes[i]
        shares = {d: given_[d] / total[d] for d in total}
        widest = {d: sizes[domains == d].max() / total[d] for d in total}
        for a in total:
            for b in total:
                assert shares[a] - shares[b] <= widest[a] + widest[b] + 1e-12


def test_one_domain_keeps_the_source_order():
    assert mixed_order(np.zeros(5, dtype=np.int64), np.array([3, 1, 4, 1, 5])).tolist() == [0, 1, 2, 3, 4]


def _corpus() -> MemorySource:
    """Two domains in the source's order one after the other, as sorted shard folders come:
    `arxiv` (4 long documents of the letter a) before `web` (60 short ones of the letter b)."""
    docs = [Document("arxiv", "a" * 3000) for _ in range(4)] + [Document("web", "b" * 200) for _ in range(60)]
    return MemorySource(docs)


@pytest.mark.parametrize("packer", ["cached", "on the fly"])
def test_a_mixed_domain_stream_mixes_from_its_first_sequences(tmp_path, packer):
    """The regression: laid end to end in the source's order, the first 12,000 tokens would be
    all `arxiv`. Interleaved, every quarter of the epoch holds both domains near their shares of
    the bytes (12,004 a's and 12,060 b's)."""
    source, tok = _corpus(), ByteTokenizer()
    if packer == "cached":
        cache = open_cache(source, tok, ["arxiv", "web"], 0.0, root=tmp_path, say=lambda m: None)
        stream = CachedSequences(cache, ["arxiv", "web"], 1000)
    else:
        stream = PackedSequences(lambda: source.documents(["arxiv", "web"]), tok.encode, tok.eos_id, 1000, 0.0)
    tokens = np.array(stream.batch(24)[:, :-1].flatten().tolist())  # one epoch: 24,064 tokens
    for quarter in np.array_split(tokens, 4):
        a, b = (quarter == ord("a")).sum(), (quarter == ord("b")).sum()
        assert 0.35 < a / (a + b) < 0.65, f"a quarter of the epoch has {a} a's and {b} b's"
