"""Checks of the chapters (notebooks/): one file per chapter, and one per rule that spans them."""
