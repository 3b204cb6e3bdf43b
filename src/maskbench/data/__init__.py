"""Datasets: where they come from (sources), how they become token streams and task splits."""
