"""The bundle build: port, lay out `build/torch-tpu` as kernel-builder's noarch build does, import check."""
