"""Our build tools: `porter` (the port), `bundle` (the kernel-builder layout and import check)."""
