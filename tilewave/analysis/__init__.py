"""tilewave.analysis."""
