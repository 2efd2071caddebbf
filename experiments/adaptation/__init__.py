"""The adaptation study: `study.py` (the decisive study's command) and its parts in
`decisive/`; `run.py` (the first study) and `yardstick_probe.py`."""
