"""seqdsl.kernels: the runtime of the generated Triton kernels (torch and triton, imported lazily).

    seqdsl.kernels.top1.run(key, q, k, v)         differentiable Top-1 element / chunk selection
    seqdsl.kernels.top1.decode(key, q, k, v)      one query against the cache
    seqdsl.kernels.top1.self_check(key, dtype, device)

The source of every kernel is rendered from the mixer's KernelKey by seqdsl.codegen, cached on
disk (kernels/cache.py: SEQDSL_CACHE_DIR, SEQDSL_KERNEL_DUMP, SEQDSL_KERNEL_OVERRIDE) and
launched by element.py / chunk.py; ops.py wraps them as torch.library custom ops.
"""
