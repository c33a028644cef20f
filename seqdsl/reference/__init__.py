"""Readable PyTorch references ("oracles") for every mixer family.

Plain functions on tensors, no modules and no IR imports: each backend and each generated kernel is
tested against these. `attention` holds the softmax-attention family (plus RoPE and ALiBi), `top1`
the Top-k element / chunk selection family of arXiv 2505.18522, `recurrent` the stateful family.
"""
