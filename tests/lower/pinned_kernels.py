"""Autotuned Triton kernels for tests/lower/test_autotune_pins.py (Triton needs a kernel's source
in a file): one whose configs zero an output first (a pre_hook, as mamba-ssm's SSD backward
kernels have), one without hooks, and one with hooks behind @triton.heuristics."""

import triton
import triton.language as tl


def zero_out(nargs):
    nargs["out_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=4, pre_hook=zero_out),
                          triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=zero_out),
                          triton.Config({"BLOCK": 64}, num_warps=8, pre_hook=zero_out)], key=["n"])
@triton.jit
def accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)))


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
@triton.autotune(configs=[triton.Config({"BLOCK": 32}, pre_hook=zero_out),
                          triton.Config({"BLOCK": 64}, pre_hook=zero_out)], key=["n"])
@triton.jit
def accumulate_even(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)))
