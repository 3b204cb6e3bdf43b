"""Downstream metrics, computed exactly as the papers report them."""
