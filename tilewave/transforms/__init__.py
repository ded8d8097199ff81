"""tilewave.transforms."""
