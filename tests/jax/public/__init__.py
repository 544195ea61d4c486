"""Upstream's public calls, checked at the call a user makes (issue: public ops).

Both this kernel's `tokamax.ops` and upstream tokamax 0.0.17 (in its own venv) run the same
`PublicCase`s: lowered for TPU on this CPU host, their whole modules must be equal once names
and locations are normalised (`normalise.py`); `selection.py` compares the config each side
chooses for every key of upstream's shipped tables. Modules here import only jax and numpy, so
the upstream venv can load them.
"""
