"""The port tool: turns hash-pinned upstream release artifacts into the kernel's package tree.

It reads a kernel-port style KDL recipe (`tokamax/port/port.kdl`), fetches each artifact with
pip by name and version, checks its sha256, applies the recipe's steps to an in-memory tree
and writes the result atomically, with its provenance, checked against a pinned lock.
"""
