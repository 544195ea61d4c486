"""Probe: `import tokamax` (upstream 0.0.17, in its own venv) and touch its ragged dot op."""

import tokamax

assert tokamax.ragged_dot is not None
