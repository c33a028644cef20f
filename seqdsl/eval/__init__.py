"""`seqdsl eval` and `seqdsl compare`: the evaluation sets of a run (sets.py), comparison of runs
at matched training loss (compare.py, plot.py) and the metrics files they read (metrics.py). The
held-out loss itself is computed in the run layer (seqdsl/run/loss.py), which training uses too.
"""
