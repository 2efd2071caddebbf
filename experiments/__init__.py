"""The studies: one folder per study (README with the current result on top, scripts, runs/),
and `experiments.lab`, the machinery they share. The scripts run as files
(`python experiments/<study>/<script>.py`) and put the repository root on `sys.path` in one
line, so that they import the lab (and the package) normally."""
