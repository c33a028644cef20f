"""What a run is, below both `seqdsl train` and `seqdsl eval`: its config (config.py), the data it
resolves to (data.py), its digest (digest.py), the device it runs on (device.py), its checkpoints
and run directory (checkpoint.py, rundir.py) and its held-out loss and eval records (loss.py,
records.py). Neither training nor evaluation imports the other; both import this.
"""
