"""Tokamax 0.0.17's Pallas Mosaic TPU kernels, ported by tools/porter from tokamax/port/port.kdl.

Generated: do not edit files in this folder; change the recipe or tokamax/port/overlay.
"""
