"""Report tables: the papers' claims next to what this workflow measured."""
