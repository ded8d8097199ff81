"""tilewave.codegen."""
