"""Upstream tokamax's own test suite, run against the port and against upstream itself.

The test files come from the pinned sdist at run time (never committed). Two sides run the same
selection in one pytest process each: "upstream" (tokamax 0.0.17 as pip installs it, in the
`upstream` venv) and "port" (the built variant's ported tree as package `tokamax`, plus the
test-only helpers listed in `selection.toml`, in the `upstream-suite` venv: JAX and test-only
libraries). `compare` then holds the port to upstream: every case upstream passes here must pass
on the port or be listed, with its reason, in `deviations.toml`.

  python -m tools.upstream_suite            # the CI selection (./test.sh runs it)
  python -m tools.upstream_suite --all      # every file upstream's CPU suite can collect
"""
