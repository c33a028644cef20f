"""Mutation check: plant each known bug, one at a time, in a copy of the repository and run the
fast tests against it. Every mutant must be caught (some test must fail).

    .venv/bin/python tests/mutants/run.py                 # fast lowering tests, every mutant
    .venv/bin/python tests/mutants/run.py --tests tests   # the whole fast suite
    .venv/bin/python tests/mutants/run.py --only o_equals_v_softmax ste_off

Prints a table (mutant, caught?, first failing test, seconds) and exits 1 if a mutant survives
or the unmutated copy fails. The bugs are those of issue 11's table, then issues 21 and 22's (data,
evaluation, accounting, parameters). Each mutant names the tests that catch it; the copy imports
every seqdsl package from itself (asserted per run). Not collected by pytest (the file name does
not start with test_).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    file: str
    old: str
    new: str
    count: int = 1  # how many occurrences of `old` the mutant replaces (all of them)
    tests: tuple[str, ...] = ("tests/lower",)  # where the fast suite catches it (--tests overrides)


# compare (issue 21): defaults, levels, flags, the in-domain table, the plot's legend
C, P, M, CLI = "seqdsl/eval/compare.py", "seqdsl/eval/plot.py", "seqdsl/eval/metrics.py", "seqdsl/cli/compare.py"
EVAL = ("tests/eval",)

MUTANTS = (
    Mutant("causal_mask_sees_next", "causal mask lets position i see i+1 (visibility_mask)",
           "seqdsl/reference/attention.py", "mask = j <= i\n", "mask = j <= i + 1\n"),
    Mutant("recurrent_sees_next", "the same in the recurrent (chunked) form",
           "seqdsl/reference/recurrent.py", "return j < i if strict else j <= i\n",
           "return j < i if strict else j <= i + 1\n"),
    Mutant("top1_chunk_second_best", "Top-1 chunk picks the second-best chunk",
           "seqdsl/reference/top1.py",
           "chosen = _topk_mask(_group_ranks(cs, candidate, group, temperature), candidate, k_top)  # (B, H, T, C)",
           "ranks = _group_ranks(cs, candidate, group, temperature); "
           "chosen = _topk_mask(ranks, candidate, k_top + 1) & ~_topk_mask(ranks, candidate, k_top)"),
    Mutant("scale_dropped", "softmax scale 1/sqrt(d) dropped where the KernelKey's scale is computed",
           "seqdsl/ir/key.py", "    return 1.0 / math.sqrt(key_dim)\n", "    return 1.0\n"),
    Mutant("scale_dropped_chunk_branch", "softmax scale dropped only in the chunk-selection branch",
           "seqdsl/reference/top1.py", "chunk=chunk_size(sel), scale=key.scale,",
           "chunk=chunk_size(sel), scale=1.0,"),
    Mutant("o_equals_v_softmax", "the softmax mixer does no mixing (o_i = v_i)",
           "seqdsl/lower/stages.py", "return o, dict(k=k_all, v=v_all, decay_row=decay_row)",
           "return repeat_heads(v, q.shape[2]), dict(k=k_all, v=v_all, decay_row=decay_row)"),
    Mutant("o_equals_v_recurrent", "the recurrent mixer does no mixing (o_i = v_i)",
           "seqdsl/lower/stages.py",
           "o, S = paths.recurrent(self.inputs(m, x, q, repeat_heads(k, H), repeat_heads(v, H)), state.S)",
           "_, S = paths.recurrent(self.inputs(m, x, q, repeat_heads(k, H), repeat_heads(v, H)), state.S); "
           "o = repeat_heads(v, H)"),
    Mutant("sdpa_window_off_by_one", "the SDPA window is one token too wide",
           "seqdsl/lower/backends/sdpa.py", 'T, window=sliding_window(key),',
           'T, window=None if sliding_window(key) is None else sliding_window(key) + 1,'),
    Mutant("ste_off", "straight-through gradients turned off in the lowering (element and chunk)",
           "seqdsl/reference/top1.py", "grad=sel.grad", 'grad="none"', count=2),
    Mutant('compare_levels_from_baseline_only', "default levels from the first (baseline) run's range only", C,
           'tables = [ps for c in curves for kind in (c.domains, c.in_domain)',
           'tables = [ps for c in curves[:1] for kind in (c.domains, c.in_domain)', tests=EVAL),
    Mutant('compare_levels_in_first_interval', 'default levels over whole runs, first evaluation interval included', C,
           'lo, hi = _shared_range([ps[1:] for ps in tables])',
           'lo, hi = _shared_range(tables)', tests=EVAL),
    Mutant('compare_levels_union_of_ranges', 'the range any run covers instead of every run', C,
           '    return (max(min(p.train_loss for p in ps) for ps in tables),\n            min(max(',
           '    return (min(min(p.train_loss for p in ps) for ps in tables),\n            max(max(', tests=EVAL),
    Mutant('compare_extrapolates_below', "a level below a run's lowest training loss is extrapolated", C,
           '        return Cell(None, NOT_REACHED)\n',
           '        return Cell(points[-1].ood + (level - points[-1].train_loss) * (points[-1].ood - points[-2].ood) / (points[-1].train_loss - points[-2].train_loss), REACHED)\n', tests=EVAL),
    Mutant('compare_extrapolates_above', "a level above a run's first training loss takes the first value", C,
           '    return Cell(None, BELOW_AT_FIRST)\n',
           '    return Cell(points[0].ood, REACHED)\n', tests=EVAL),
    Mutant('compare_baseline_last_run', 'the default baseline is the last run, not the first', C,
           'base = names[0] if baseline is None else baseline',
           'base = names[-1] if baseline is None else baseline', tests=EVAL),
    Mutant('compare_early_flag_off_by_one', 'EARLY flags the second interval instead of the first', C,
           '((EARLY, i == 0),',
           '((EARLY, i == 1),', tests=EVAL),
    Mutant('compare_sparse_flag_whole_span', 'SPARSE only when the interval is the whole range', C,
           'width > SPARSE_FRACTION * span',
           'width >= span', tests=EVAL),
    Mutant('compare_in_domain_row_reads_ood', 'the in-domain table is filled from the OOD evaluations', C,
           'in_domain = _table(curves, lambda c: c.in_domain, chosen, base)',
           'in_domain = _table(curves, lambda c: c.domains, chosen, base)', tests=EVAL),
    Mutant('compare_window_one_record', 'the default training-loss window is one record', C,
           'DEFAULT_WINDOW = 10\n',
           'DEFAULT_WINDOW = 1\n', tests=EVAL),
    Mutant('compare_warning_levels_repeated', 'a warning repeats a level once per domain it flags', C,
           '                if level not in grouped.setdefault(key, []):\n                    grouped[key].append(level)',
           '                grouped.setdefault(key, []).append(level)', tests=EVAL),
    Mutant('compare_plot_levels_unlabelled', 'the dotted level lines have no legend entry', P,
           'label=level_legend(cmp) if k == 0 else "_nolegend_")',
           'label="_nolegend_")', tests=EVAL),
    Mutant('compare_label_ignores_model_name', "the model column reads config.json's model (null) only", M,
           'model = config.get("model_name") or config.get("model")',
           'model = config.get("model")', tests=EVAL),
    Mutant('compare_cli_no_warning', 'the CLI prints no warning for flagged values', CLI,
           '    if flagged:\n',
           '    if flagged and False:\n', tests=EVAL),
    # the token cache and CUDA-graph gradients (issue 22)
    Mutant("tokencache_no_checksum", "a cache whose bytes changed is used without rebuilding",
           "seqdsl/data/tokencache.py", "if file_sha256(path / name) != meta[\"sha256\"][name]:", "if False:",
           tests=("tests/data",)),
    Mutant("tokencache_stamps_trust_fresh_files", "a cache rewritten within a clock tick of its check is trusted",
           "seqdsl/data/tokencache.py", "if any(mtime > time.time_ns() - _STAMP_MARGIN_NS for _, mtime in stamps.values()):",
           "if False:", tests=("tests/data",)),
    Mutant("cuda_graph_grads_not_allocated", "with CUDA graphs, a backward output is installed as .grad",
           "seqdsl/train/step.py", "            p.grad = torch.zeros_like(p)\n", "            pass\n",
           tests=("tests/train/test_step.py",)),
    # data, evaluation, accounting and parameters (issue 21)
    Mutant('pieces_ignore_heldout_cache', 'the token cache keeps held-out units in training',
           'seqdsl/data/tokencache.py', 'for piece in split_heldout(doc.text, heldout)[0]:',
           'for piece in [doc.text]:', tests=('tests/data',)),
    Mutant('pieces_ignore_heldout_fly', 'packing on the fly keeps held-out units in training',
           'seqdsl/data/packing.py', 'yield from training_pieces(self.documents(), self.heldout)',
           'yield from (doc.text for doc in self.documents())', tests=('tests/data',)),
    Mutant('domains_not_mixed', 'several training domains are laid one after another, not interleaved',
           'seqdsl/data/mixing.py', '    if len(labels) <= 1:\n', '    if True:\n', tests=('tests/data',)),
    Mutant('packing_drops_eos', 'packed documents lose their end-of-document token',
           'seqdsl/data/packing.py', 'yield epoch, index, self.encode(piece) + [self.eos_id]',
           'yield epoch, index, self.encode(piece)', tests=('tests/data',)),
    Mutant('cache_stride_off_by_one', 'cached sequences advance T + 1 (a token never a target)',
           'seqdsl/data/tokencache.py', 'np.arange(n, dtype=np.int64)[:, None] * T +',
           'np.arange(n, dtype=np.int64)[:, None] * (T + 1) +', tests=('tests/data',)),
    Mutant('cache_resume_ignores_offset', 'resuming from the cache drops the offset inside the piece',
           'seqdsl/data/tokencache.py', 'int(self._begins[cursor.doc]) + cursor.offset',
           'int(self._begins[cursor.doc])', tests=('tests/data',)),
    Mutant('resume_restarts_stream', 'a resumed run restarts the data stream',
           'seqdsl/train/run.py', 'Cursor(**loaded.state["cursor"])',
           'Cursor()', tests=('tests/data/test_guarantees.py',)),
    Mutant('eval_heldout_depends_on_setting', "a domain's held-out text depends on whether it is trained on",
           'seqdsl/data/heldout.py', 'for unit in split_heldout(doc.text, heldout)[1]:',
           'for unit in split_heldout(doc.text, heldout if doc.domain in train_domains else 2 * heldout)[1]:', tests=('tests/data',)),
    Mutant('bpb_counts_characters', 'bits per byte counts characters, not UTF-8 bytes',
           'seqdsl/data/heldout.py', 'self.n_bytes += len(text.encode("utf-8")) + 1',
           'self.n_bytes += len(text) + 1', tests=('tests/data/test_guarantees.py',)),
    Mutant('bpb_cut_counts_tokens', 'a cut unit counts its tokens as bytes',
           'seqdsl/data/heldout.py', 'self.n_bytes += tokenizer.text_bytes(kept)',
           'self.n_bytes += len(kept)', tests=('tests/data',)),
    Mutant('bpb_drops_a_token', 'bits per byte over N - 1 tokens',
           'seqdsl/run/loss.py', 'bpb=loss * n / (math.log(2) * n_bytes)',
           'bpb=loss * (n - 1) / (math.log(2) * n_bytes)', tests=('tests/data/test_guarantees.py', 'tests/eval')),
    Mutant('flops_recurrent_no_readout', 'recurrent FLOPs miss the q S read-out',
           'seqdsl/ir/flops.py', 'per_head += 2.0 * 2.0 * C * Fk',
           'per_head += 0.0', tests=('tests/eval/test_flops_measured.py',)),
    Mutant('flops_rwkv6_bonus_dropped', "RWKV-6's bonus term missing from FLOPs",
           'seqdsl/ir/flops.py', "per_head += 2.0 * Fk + 2.0 * Dv  # RWKV-6's",
           "per_head += 0.0  # RWKV-6's", tests=('tests/eval/test_flops_measured.py',)),
    Mutant('flops_chunk_own_dropped', "chunk selection's local chunk not counted",
           'seqdsl/ir/flops.py', '    own_attended = sel.local or sel.k > ci\n',
           '    own_attended = sel.k > ci\n', tests=('tests/eval/test_flops_measured.py',)),
    Mutant('flops_conv_dropped', "the short convolution's FLOPs dropped",
           'seqdsl/ir/flops.py', 'return matmul(plan.inputs.channels * plan.inputs.conv)',
           'return Flops(0.0, 0.0)', tests=('tests/eval/test_flops_measured.py',)),
    Mutant('mfu_forward_only', 'MFU credits forward FLOPs only',
           'seqdsl/train/throughput.py', 'flops_per_token(program, spec, seq_len).training',
           'flops_per_token(program, spec, seq_len).forward', tests=('tests/eval/test_flops_measured.py',)),
    Mutant('rope_base_ignored_when_decoding', "rope's base ignored on the decoding path",
           'seqdsl/lower/stages.py', 'q, k = rope(q, base, offset=pos), rope(k, base, offset=pos)',
           'q, k = rope(q, base if x.shape[1] > 1 else 10000.0, offset=pos), rope(k, base, offset=pos)',
           tests=('tests/lower',)),
    Mutant('temperature_misses_bias_on_sdpa', 'temperature not applied to the additive bias on SDPA',
           'seqdsl/lower/backends/sdpa.py', 'mask = (bias / key.temperature).masked_fill(~visible, float("-inf")).to(q.dtype)',
           'mask = bias.masked_fill(~visible, float("-inf")).to(q.dtype)', tests=('tests/lower',)),
    Mutant('generate_ignores_temperature', 'generate samples at temperature 1 whatever is asked',
           'seqdsl/lower/lm.py', 'torch.softmax(last / temperature, -1), 1, generator=generator)',
           'torch.softmax(last, -1), 1, generator=generator)', tests=('tests/lower',)),
    Mutant('generate_text_drops_temperature', 'generate_text does not pass the temperature on',
           'seqdsl/text.py', 'out = lm.generate(tokens, steps, temperature=temperature, generator=generator)',
           'out = lm.generate(tokens, steps, generator=generator)', tests=('tests/lower',)),
    Mutant('sdpa_causal_for_any_scale', "SDPA's is_causal path taken for scale <= 0 (NaN rows)",
           'seqdsl/ir/support.py', ' and not key.score_bias and positive:',
           ' and not key.score_bias:', tests=('tests/lower',)),
    Mutant('sdpa_scale_judged_in_float64', "SDPA's is_causal path taken for a scale that is 0 in float32 "
           "(1.5e-109: NaN rows)", 'seqdsl/ir/support.py', '    positive = _float32(key.scale / key.temperature) > 0',
           '    positive = key.scale / key.temperature > 0', tests=('tests/lower/test_lowering_contract.py',)),
    Mutant('fla_any_width', 'fla is planned for key/value widths that are not powers of two',
           'seqdsl/ir/support.py', '    if odd:\n', '    if False:\n', tests=('tests/ir',)),
    Mutant('triton_negative_scale', 'the Triton kernels accept scale <= 0',
           'seqdsl/ir/support.py', '    if key.scale <= 0:',
           '    if key.scale < -1e9:', tests=('tests/lower',)),
    Mutant('sdpa_kv_groups_random_keys', 'kv_groups with random keys: values not repeated per head',
           'seqdsl/lower/backends/sdpa.py', 'k, v = attn_ref.repeat_heads(k, H), attn_ref.repeat_heads(v, H)',
           'k = attn_ref.repeat_heads(k, v.shape[2])', tests=('tests/lower',)),
    Mutant('taylor_conflict_dropped', 'taylor features with a per-channel decay no longer refused',
           'seqdsl/ir/conflicts.py', 'if not softmax and feature in WIDENING_FEATURES and per_key_channel:',
           'if False:', tests=('tests/ir',)),
    Mutant('sdpa_mask_drops_sink', "window(w, sink=n): the SDPA mask forgets the sink tokens",
           'seqdsl/lower/backends/sdpa.py', 'keys=L, sink=key.sink)', 'keys=L)', tests=('tests/lower',)),
    Mutant('flops_sink_uncounted', "window(w, sink=n): FLOPs count the window only",
           'seqdsl/ir/flops.py', 'return min(i + 1, window) + max(0, min(key.sink, i - window + 1))',
           'return min(i + 1, window)', tests=('tests/eval/test_flops_measured.py',)),
    # 2026-11-27 (issue 22): what the start-up and Mamba-2 speed work relies on
    Mutant('conv_promotes_to_float32', "the convolution's float32 weight promotes bf16 activations (mamba's SSD in float32)",
           'seqdsl/reference/conv.py', 'return F.silu(out).to(u.dtype), last_inputs(u, past, size)',
           'return F.silu(out), last_inputs(u, past, size)',
           tests=('tests/lower/test_lowering_contract.py',)),
    Mutant('block_scope_per_block', 'the block scope compiles a graph per block (a per-block constant in the traced body)',
           'seqdsl/lower/lm.py', 'return block(x, _FRESH, keep_state=False)[0]',
           'return block(x, _FRESH, keep_state=False)[0] * (1.0 + 0.0 * float(id(block) % 7))',
           tests=('tests/train/test_step.py',)),
    Mutant('element_window_forgets_sink_queries', 'window(w, sink=n) element kernels: a sink key block gets dk '
           'from its window queries only', 'codegen/templates/element.py.jinja',
           '    if pid * BLOCK_N < SINK:\n        last = T\n', '', tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('element_window_fwd_lo_off_by_one', 'window(w, sink=n) element forward: the window starts one key late',
           'codegen/templates/element.py.jinja', 'tl.maximum(pid * BLOCK_M + Q_OFF - WINDOW + 1, 0)',
           'tl.maximum(pid * BLOCK_M + Q_OFF - WINDOW + 2, 0)', tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('element_window_dq_lo_off_by_one', 'window(w, sink=n) element dq: the window starts one key late',
           'codegen/templates/element.py.jinja', 'tl.maximum(pid * BLOCK_M - WINDOW + 1, 0)',
           'tl.maximum(pid * BLOCK_M - WINDOW + 2, 0)', tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('element_window_dkdv_last_off_by_one', 'window(w, sink=n) element dk/dv: the last query seeing a key dropped',
           'codegen/templates/element.py.jinja', '(pid + 1) * BLOCK_N - 1 + WINDOW, T)',
           '(pid + 1) * BLOCK_N - 2 + WINDOW, T)', tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('element_window_unsafe_max', 'window(w, sink=n) element forward: -inf running maximum in the softmax terms',
           'codegen/templates/element.py.jinja', '{{ "m_safe" if window else "new_best" }}', 'new_best', count=2,
           tests=('tests/kernels/test_top1_kernels.py',)),
    # grouped-query attention in the training kernels (issue 25)
    Mutant('gqa_sums_one_query_head', 'grouped-query kernels: dk/dv take the first query head of each group only',
           'codegen/templates/common.jinja', '    for member in range(GROUP):', '    for member in range(1):',
           tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('gqa_key_head_of_query_head', 'grouped-query kernels: query head h reads key head h % HK, not h // GROUP',
           'codegen/templates/chunk.py.jinja', '    hk = h // GROUP\n    offs_k', '    hk = h % (H // GROUP)\n    offs_k',
           tests=('tests/kernels/test_top1_kernels.py',)),
    Mutant('gqa_repeats_in_training', "the Triton backend repeats grouped keys and values in training",
           'seqdsl/lower/backends/triton.py', 'if shared_kv_group(key) > 1:', 'if False:',
           tests=('tests/kernels/test_top1_kernels.py',)),
    # top-k chunk kernels, k > 1 (issue 25)
    Mutant('topk_ties_go_to_later_chunks', 'top-k chunk selection: an equal score replaces the weakest entry',
           'codegen/templates/topk_chunk.py.jinja', 'take = ({{ score }} > weakest)', 'take = ({{ score }} >= weakest)',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_merge_drops_last_slot', "top-k chunk merge: the last selected chunk's partial is left out",
           'codegen/templates/topk_chunk.py.jinja', 'for s in tl.static_range(TOPK):\n        pair = rows * TOPK + s',
           'for s in tl.static_range(TOPK - 1):\n        pair = rows * TOPK + s',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_gate_dk_dropped', "top-k chunk STE: the gate's gradient never reaches k",
           'codegen/templates/topk_chunk.py.jinja', 'tl.store(DKG + rows_k, acc * GRAD_SCALE',
           'tl.store(DKG + rows_k, 0.0 * acc * GRAD_SCALE',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_gate_ignores_the_selection', "top-k chunk STE (Approx): dq's gate term as if no chunk were selected",
           'codegen/templates/topk_chunk.py.jinja', '(picked - g[:, None])', '(0.0 - g[:, None])',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_dq_sum_reads_empty_slots', "top-k chunk dq_sum: an empty slot's (unwritten) dq part is added",
           'codegen/templates/topk_chunk.py.jinja', 'chosen = tl.load(SEL + pair, mask=live, other=-1) >= 0',
           'chosen = live', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_dq_sum_drops_own_chunk', "top-k chunk dq_sum: the own chunk's dq part is left out",
           'codegen/templates/topk_chunk.py.jinja', 'acc += tl.load(DQ + at, mask=live[:, None], other=0.0)',
           'acc += 0.0 * tl.load(DQ + at, mask=live[:, None], other=0.0)', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('topk_long_chunk_own_tiles_dropped', "top-k over chunks longer than a tile: the own chunk's last earlier "
           "tile is not attended", 'kernels/topk_chunk.py', 'torch.where(earlier < own_tile[:, None], earlier, -1)',
           'torch.where(earlier < own_tile[:, None] - 1, earlier, -1)', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('gqa_loop_variable_named_g', "the grouped-query loop's variable is `g` again, which the STE gate rebinds "
           "(the interpreter runs it; Triton's compiler refuses it)", 'codegen/templates/common.jinja',
           'for member in range(GROUP):', 'for g in range(GROUP):  # member = g\n        member = g',
           tests=('tests/kernels/test_compile_for_gpu.py',)),
    Mutant('out_of_memory_traceback', "running out of device memory mid-run is a traceback again",
           'seqdsl/train/run.py', '    except torch.OutOfMemoryError as err:\n        raise _out_of_memory(run, step, err) from None\n',
           '', tests=('tests/train/test_faults.py',)),
    Mutant('topk_element_keeps_the_worst', "top-k element selection: the running list keeps the lowest-ranked keys",
           'codegen/templates/topk_element.py.jinja', 'dim=1, descending=True)', 'dim=1, descending=False)',
           tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('topk_element_bound_too_high', "top-k element selection: the bound is the best group maximum, not the k-th",
           'codegen/templates/topk_element.py.jinja', 'slots[None, :] == TOPK - 1, best, NONE)',
           'slots[None, :] == 0, best, NONE)', tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('topk_element_window_skips_sinks', "top-k element selection under a window: the sink tokens' tiles are not scanned",
           'codegen/templates/topk_element.py.jinja', '    sink_end = tl.minimum(SINK_END, last)\n',
           '    sink_end = tl.minimum(SINK_END, last) * 0\n', tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('topk_element_dk_dropped', "top-k element backward: the pairs' dk terms are never added",
           'codegen/templates/topk_element.py.jinja', 'ds[:, :, None] * q[:, None, :] * GRAD_SCALE, mask=pair)',
           'ds[:, :, None] * q[:, None, :] * GRAD_SCALE, mask=pair & False)',
           tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('topk_element_ste_as_none', "top-k element STE: q and k trained through the chosen keys' softmax, not the surrogate",
           'kernels/topk_element.py', '    ste = sel.grad == "ste"\n    do = do.contiguous()\n',
           '    ste = False\n    do = do.contiguous()\n', tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('topk_element_ste_hard_dv_soft', "top-k element STE, value_grad = hard: dv taken from the surrogate (p^T dO)",
           'kernels/topk_element.py', '    if ste and sel.value_grad == "soft":', '    if ste:',
           tests=('tests/kernels/test_topk_element_kernels.py',)),
    Mutant('inverse_by_halves_swapped', "delta-rule inverse by halves: the lower-left block multiplies the halves' inverses in the wrong order",
           'seqdsl/reference/recurrent.py', 'lower_left = -(inv_lr @ (lhs[..., h:, :h] @ inv_ul))',
           'lower_left = -(inv_ul @ (lhs[..., h:, :h] @ inv_lr))', tests=('tests/lower/test_recurrent_ref.py',)),
    Mutant('state_walk_adjoint_untransposed', "the state-passing kernel's backward walks with the transitions "
           "untransposed", 'kernels/state_pass.py', '        square = rows[None, :] * DK + rows[:, None]',
           '        square = rows[:, None] * DK + rows[None, :]', tests=('tests/kernels/test_state_pass.py',)),
    Mutant('state_walk_drops_first_state', "the state-passing kernel stores the entering state nowhere",
           'kernels/state_pass.py', '    tl.store(states + (N if REVERSE else 0) * DK * DV + tile, x)\n', '',
           tests=('tests/kernels/test_state_pass.py',)),
    Mutant('conv_du_reads_one_late', "the causal conv's du reads g one position late",
           'kernels/causal_conv.py', '        src = t + (S - 1 - s)\n', '        src = t + (S - s)\n',
           tests=('tests/kernels/test_causal_conv.py',)),
    Mutant('conv_dw_drops_a_span', "the causal conv's weight gradient keeps only the first span of each sequence",
           'kernels/causal_conv.py', '    return du, parts.sum(0).to(weight.dtype)',
           '    return du, parts.view(B, spans, C, S)[:, 0].sum(0).to(weight.dtype)',
           tests=('tests/kernels/test_causal_conv.py',)),
    Mutant('conv_decoding_on_the_kernel', "a decoding call with a past runs the kernel, which ignores the past",
           'seqdsl/lower/conv_path.py', 'if plan.backend is BackendName.TRITON and past is None and not self.planning_only:',
           'if plan.backend is BackendName.TRITON and not self.planning_only:',
           tests=('tests/kernels/test_causal_conv.py',)),
    Mutant('delta_chunk_products_ignored', "the delta rule's chunk products stay in float32 whatever `products` says",
           'seqdsl/reference/recurrent.py',
           '    low = (lambda t: t) if products is None else (lambda t: t.to(products))\n',
           '    low = lambda t: t\n', tests=('tests/kernels/test_state_pass.py',)),
    Mutant('verdicts_ignore_source', "a self-check verdict recorded on other source code is read back",
           'seqdsl/lower/verdicts.py', ' | {"seqdsl_source": source_digest()}', '',
           tests=('tests/lower/test_selfcheck_cache.py',)),
    Mutant('pins_ignore_the_gpu', "an autotuning choice recorded on another GPU kind is put back",
           'seqdsl/lower/backends/autotune_pins.py', '(r["gpu"], r["triton"], r["version"]) != (gpu,',
           '(gpu, r["triton"], r["version"]) != (gpu,', tests=('tests/lower/test_autotune_pins.py',)),
    Mutant('pins_copy_the_config', "a pinned choice is a new config object, without the kernel's pre_hook",
           'seqdsl/lower/backends/autotune_pins.py', '        tuner.cache[key] = same[0]\n',
           '        tuner.cache[key] = type(same[0])(same[0].kwargs, num_warps=same[0].num_warps)\n',
           tests=('tests/lower/test_autotune_pins.py',)),
    Mutant('chunk_sinks_ignored', "the reference attends no sink tokens under chunk selection",
           'seqdsl/reference/top1.py',
           '        attend = attend | ((torch.arange(T, device=q.device) < sink)[None, :] & visible)\n',
           '        pass\n', tests=('tests/lower/test_golden.py',)),
    Mutant('chunk_sink_kernel_counts_twice', "the top-k chunk kernels attend a sink key again inside a selected chunk",
           'codegen/templates/topk_chunk.py.jinja',
           '        sunk = sunk & (cols[None, :] // CHUNK != chosen[:, None])\n',
           '        sunk = sunk & (chosen[:, None] > -2)\n', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('chunk_sink_kernel_no_dk', "the sink keys' dk from the queries that attend them as sinks is dropped",
           'kernels/topk_chunk.py',
           '    for grad, part in ((dk, dks), (dv, dvs)):  # (B, H, blocks, block, D) -> (B, n, HK, D)\n',
           '    for grad, part in ((dv, dvs),):  # (B, H, blocks, block, D) -> (B, n, HK, D)\n',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('fla_import_everything', "seqdsl imports fla's layers and models with its ops",
           'seqdsl/lower/backends/fla.py', '    if "fla" not in sys.modules:\n', '    if False:\n',
           tests=('tests/lower/test_fla_import.py',)),
    Mutant('fla_exports_lost', "after seqdsl's import, `from fla import <layer>` fails",
           'seqdsl/lower/backends/fla.py',
           '            vars(package)["__getattr__"] = functools.partial(_export_extensions, package)  # PEP 562\n',
           '            pass\n', tests=('tests/lower/test_fla_import.py',)),
    Mutant('rwkv7_recomputes', "RWKV-7's fla call recomputes its forward in the backward while training",
           'seqdsl/lower/backends/fla.py', '                                     disable_recompute=torch.is_grad_enabled())\n',
           '                                     disable_recompute=False)\n',
           tests=('tests/lower/test_lowering_contract.py',)),
    Mutant('ssd_kept_swapped', "Mamba-2's backward gets the kept chunk states and CB in the wrong order",
           'seqdsl/lower/backends/mamba_ssd.py', '    ctx.save_for_backward(*inputs[:-1], *kept)\n',
           '    ctx.save_for_backward(*inputs[:-1], *kept[::-1])\n',
           tests=('tests/lower/test_mamba_custom_ops.py',)),
    Mutant('ssd_final_gradient_none', "Mamba-2's backward is given no final-state gradient when training ignores it",
           'seqdsl/lower/backends/mamba_ssd.py',
           '    if dfinal is None:\n        dfinal = x.new_zeros(batch, H, V, Bm.shape[-1], dtype=torch.float32)\n', '',
           tests=('tests/lower/test_mamba_custom_ops.py',)),
    Mutant('custom_op_name_ignores_schema', "two schemas of a custom op share one name (a warm compile cache "
           "runs the old graph)", 'seqdsl/custom_ops.py',
           '    return f"{name}_{hashlib.sha256(schema.encode()).hexdigest()[:8]}"\n', '    return f"{name}_x"\n',
           tests=('tests/test_custom_ops.py',)),
    Mutant('shared_selection_ignored', "`share = group`: each head still chooses its own chunks",
           'seqdsl/reference/top1.py', '    if group == 1:\n        return cs\n', '    return cs\n',
           tests=('tests/lower/test_top1_ref.py',)),
    Mutant('shared_selection_with_the_gate_on_the_kernels', "the generated kernels take `share = group` with "
           "the STE gate (their gate is per head)", 'seqdsl/ir/support.py',
           '    if sel.share == "group" and (sel.grad == "ste" or not sel.local):\n',
           '    if sel.share == "group" and not sel.local:\n',
           tests=('tests/ir/test_support.py', 'tests/check/test_rules.py')),
    Mutant('shared_kernel_skips_the_group', "the shared select kernel ranks by the group's first head alone",
           'codegen/templates/topk_chunk.py.jinja', '        for g in range(SHARE):  # each head\'s log2 probability of each chunk among its candidates\n',
           '        for g in range(1):  # each head\'s log2 probability of each chunk among its candidates\n',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('shared_kernel_unnormalised', "the shared select kernel sums the heads' raw scores, not their probabilities",
           'codegen/templates/topk_chunk.py.jinja', '            x = score * FACTOR - lsec\n',
           '            x = score * FACTOR\n', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('group_pass_skips_own_chunk', "the per-group attention leaves out the query's own chunk",
           'codegen/templates/topk_chunk.py.jinja',
           '    for s in range(TOPK + 1):  # the chosen chunks (earlier, complete; -1: an empty slot), then the own one\n',
           '    for s in range(TOPK):  # the chosen chunks (earlier, complete; -1: an empty slot), then the own one\n',
           tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('sorted_selection_ties_keep_the_later_chunk', "the sorted selection's ranks break a tie toward the "
           "later chunk (the reference's stable sort keeps the earlier)", 'codegen/templates/common.jinja',
           'rank = (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - {{ index }}).to(tl.int64)\n',
           'rank = (ordered.to(tl.int64) << 32) | ({{ index }}).to(tl.int64)\n',
           tests=('tests/kernels/test_topk_kernels.py', 'tests/kernels/test_topk_element_kernels.py')),
    Mutant('lse_chunk_score_is_max', "the top-k kernels score a chunk by its best key where the key says lse",
           'codegen/templates/topk_chunk.py.jinja',
           '    return tl.where(m == float("-inf"), float("-inf"), m_safe + tl.log2(total) / FACTOR)\n',
           '    return m\n', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('lse_gate_weights_uniform', "the lse gate's gradient spread evenly over a chunk's keys",
           'codegen/templates/topk_chunk.py.jinja',
           '        weight = tl.exp2((s_tile - raw[:, None]) * FACTOR)  # d(score)/d(raw q . k) per key\n',
           '        weight = tl.zeros_like(s_tile) + 1.0 / CHUNK\n', tests=('tests/kernels/test_topk_kernels.py',)),
    Mutant('plan_paths_runs_the_kernel', "planning's two-token forward runs the planned kernels",
           'seqdsl/lower/paths.py', '        if self.planning_only:\n            return backends.REFERENCE.recur(self.key, CHUNKED, m, S)\n',
           '', tests=('tests/lower/test_plan_dispatch.py',)),
    Mutant('selfcheck_time_uncounted', "first-use self-checks' time left out of the first-step record",
           'seqdsl/lower/verdicts.py', '        _SPENT.seconds += time.perf_counter() - t0\n', '',
           tests=('tests/lower/test_selfcheck_cache.py',)),
    Mutant('autotune_seed_overwrites', "the shipped autotuning replaces a result Triton wrote on this machine",
           'seqdsl/lower/backends/autotune_seed.py',
           '        if target.exists() and not _seeded_from_another_gpu(target, src, gpu, root):\n            continue\n', '',
           tests=('tests/lower/test_autotune_seed.py',)),
    Mutant('autotune_seed_prefers_another_gpu', "another GPU's recording of a tuning is seeded where this GPU has its own",
           'seqdsl/lower/backends/autotune_seed.py', 'key=lambda p: p.name != gpu', 'key=lambda p: p.name == gpu',
           tests=('tests/lower/test_autotune_seed.py',)),
    Mutant('autotune_seed_replaces_triton_tunings', "a file Triton tuned here gives way to this GPU's shipped recording",
           'seqdsl/lower/backends/autotune_seed.py', 'return here != src.read_bytes() and any(',
           'return here != src.read_bytes() or any(', tests=('tests/lower/test_autotune_seed.py',)),
    Mutant('fresh_train_overwrites_evaluations', "a fresh start writes over a folder holding a run's evaluations",
           'seqdsl/train/run.py', 'if holds_evaluations(out / layout.METRICS):', 'if False:',
           tests=('tests/train/test_faults.py',)),
    Mutant('eval_out_onto_the_run', "`seqdsl eval --out` may name the run's own metrics.jsonl",
           'seqdsl/run/layout.py', 'if target in {root / name for name in RECORDS}', 'if target in set()',
           tests=('tests/eval/test_eval_cli.py',)),
    Mutant('eval_appends_other_text', "records of other evaluation text are appended to metrics.jsonl",
           'seqdsl/cli/eval.py', 'elif ckpt.run is not None and (other := other_text(args, ckpt.config)):',
           'elif False:', tests=('tests/eval/test_eval_cli.py',)),
    Mutant('bench_counts_the_2k_model', "the training benchmark resizes a spec at the preset's 2K context, "
           "so MoBA's FLOPs at 8K are counted with 128-token chunks",
           'benchmarks/bench_train.py', 'preset=preset, context=seq,', 'preset=preset, context=None,',
           tests=('tests/train/test_bench_train.py',)),
)


# Top-level folders shipped inside the package (pyproject.toml's package-dir): an editable install
# maps `seqdsl.codegen` etc. to the *original* checkout through its import finder, which the copy's
# PYTHONPATH does not override; links inside the copy's seqdsl/ make the copy's own folders win.
SHIPPED = {"codegen": "codegen", "kernels": "kernels", "grammar": "grammar"}


def copy_repo(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis",
                                    "*.egg-info", "runs", "build", "dist")
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)
    for name, folder in SHIPPED.items():
        (dest / "seqdsl" / name).symlink_to(Path("..") / folder, target_is_directory=True)


# Printed by the copy's interpreter: where each package it will test was imported from.
_WHERE = ("import importlib, os, sys\n"
          "for name in sys.argv[1:]:\n"
          "    print(name, os.path.realpath(importlib.import_module(name).__file__))\n")


def assert_imports_from(root: Path, env: dict) -> None:
    """Every seqdsl package the tests import resolves to the copy at `root`, not the checkout."""
    names = ["seqdsl"] + [f"seqdsl.{n}" for n in SHIPPED]
    check = subprocess.run([sys.executable, "-c", _WHERE, *names], cwd=root, env=env, capture_output=True, text=True)
    real_root = os.path.realpath(root)
    found = dict(line.split(" ", 1) for line in check.stdout.splitlines())
    wrong = [f"{n} from {found.get(n, '?')}" for n in names if not found.get(n, "").startswith(real_root + os.sep)]
    if wrong or check.returncode:
        raise SystemExit(f"the copy at {root} does not import its own code: {'; '.join(wrong)} {check.stderr}")


def plant(root: Path, mutant: Mutant) -> None:
    path = root / mutant.file
    text = path.read_text()
    found = text.count(mutant.old)
    if found != mutant.count:
        raise SystemExit(f"mutant {mutant.name}: expected {mutant.count} occurrence(s) of {mutant.old!r} "
                         f"in {mutant.file}, found {found}: update tests/mutants/run.py")
    path.write_text(text.replace(mutant.old, mutant.new))


def run_tests(root: Path, tests: list[str], marker: str) -> tuple[bool, str, float]:
    """(passed, first failing test, seconds) for the tests run inside the copy at `root`."""
    # a cache of its own per copy: a self-check verdict or a kernel cached by the clean copy must
    # not stand in for the mutant's
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1",
               SEQDSL_CACHE_DIR=str(root / ".seqdsl-cache"))
    assert_imports_from(root, env)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", marker, "-p", "no:cacheprovider",
                           "-rf", *tests], cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    if proc.returncode not in (0, 1):
        failed = failed or [f"pytest exit {proc.returncode}: {proc.stdout[-300:]}{proc.stderr[-300:]}"]
    return proc.returncode == 0, (failed[0] if failed else ""), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="+", help="pytest paths for every mutant (default: each mutant's own, "
                                                    "e.g. tests/lower; `--tests tests` runs the whole fast suite)")
    parser.add_argument("--marker", default="not slow", help='pytest -m expression (default "not slow")')
    parser.add_argument("--only", nargs="+", help="mutant names to run (default all)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    rows, survivors = [], 0
    with tempfile.TemporaryDirectory(prefix="seqdsl-mutants-") as tmp:
        base = Path(tmp) / "clean"
        copy_repo(base)
        every = args.tests or sorted({t for m in chosen for t in m.tests})
        ok, first, seconds = run_tests(base, every, args.marker)
        if not ok:
            print(f"the unmutated copy fails ({first}): fix the suite first")
            return 1
        print(f"unmutated copy: {' '.join(every)} -m {args.marker!r} passes ({seconds:.0f} s)\n", flush=True)
        for mutant in chosen:
            root = Path(tmp) / mutant.name
            copy_repo(root)
            plant(root, mutant)
            passed, first, seconds = run_tests(root, args.tests or list(mutant.tests), args.marker)
            survivors += passed
            rows.append((mutant.name, "NOT CAUGHT" if passed else "caught", first, f"{seconds:.0f}"))
            # as it goes: a run cut short (a time limit) still says what it found
            print(f"{len(rows)}/{len(chosen)} {mutant.name}: {rows[-1][1]} ({seconds:.0f} s)", flush=True)
            shutil.rmtree(root)
    widths = [max(len(r[i]) for r in rows + [("mutant", "result", "first failing test", "s")]) for i in range(4)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(("mutant", "result", "first failing test", "s")))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
