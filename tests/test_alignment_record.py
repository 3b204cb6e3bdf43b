"""The alignment's GPU record (src/maskbench/align/alignment_record.yaml, maskbench.alignment_record):
which backend `auto` runs, and what the plan prices an alignment at."""

import math

import pytest

from maskbench import alignment_record


def measured(kernel_ms, reference_ms, B=64, M=77, L=308):
    return {"B": B, "M": M, "L": L, "kernel_ms": kernel_ms, "reference_ms": reference_ms, "record": "a/part-a.json"}


def test_the_committed_record_is_unmeasured_for_the_kernel_and_times_the_reference():
    assert alignment_record.crossover_points() == () and not alignment_record.kernel_pays_somewhere()
    assert [(t["B"], t["M"], t["L"]) for t in alignment_record.reference_timings()] == [(64, 77, 308), (64, 198, 1586)]


def test_auto_takes_the_faster_backend_at_the_nearest_measured_work(monkeypatch):
    """The old kernel's pattern: faster at 64 x 77 x 308, slower at 64 x 198 x 1586."""
    points = (measured(14.7, 52.1), measured(459.9, 294.2, M=198, L=1586))
    monkeypatch.setattr(alignment_record, "crossover_points", lambda: points)
    kernel_pays = alignment_record.kernel_pays
    assert kernel_pays((64, 77, 308)) and kernel_pays((16, 77, 308))
    assert not kernel_pays((64, 198, 1586)) and not kernel_pays((32, 190, 1400))
    assert kernel_pays((64, 100, 500))                          # work 1.6e9: nearer 4.7e8 than 3.2e10


def test_two_timings_fit_a_per_step_and_a_per_work_part_exactly():
    """t = a (M + 1) + b B M L^2 through the reference's two H200 timings: ~0.64 ms a step
    (launches and syncs) and ~5.3e-9 ms a (sequence, step, edge) triple."""
    timings = alignment_record.reference_timings()
    a, b = alignment_record.fit(timings)
    assert a == pytest.approx(0.636, rel=0.01) and b == pytest.approx(5.26e-9, rel=0.01)
    for t in timings:
        assert alignment_record.alignment_ms((t["B"], t["M"], t["L"])) == pytest.approx(t["ms"])


def test_one_timing_scales_with_the_work_alone():
    a, b = alignment_record.fit([{"B": 2, "M": 3, "L": 10, "ms": 6.0}])
    assert a == 0 and b == pytest.approx(6.0 / 600)


def test_pricing_follows_the_backend_auto_runs(monkeypatch):
    """Where the kernel won, its own timings price the alignment; elsewhere the reference's."""
    monkeypatch.setattr(alignment_record, "crossover_points", lambda: (measured(5.0, 52.1),))
    assert alignment_record.alignment_ms((64, 77, 308)) == pytest.approx(5.0)
    monkeypatch.setattr(alignment_record, "crossover_points", lambda: (measured(80.0, 52.1),))
    assert alignment_record.alignment_ms((64, 77, 308)) == pytest.approx(52.1, rel=1e-3)


@pytest.mark.parametrize("text,message", [
    ("status: unmeasured\npoints: [{B: 1, M: 2, L: 3, kernel_ms: 1, reference_ms: 2, record: r}]",
     "status 'unmeasured' with 1"),
    ("status: measured\npoints: []", "status 'measured' with 0"),
    ("status: measured\npoints: [{B: 1, M: 2, L: 3}]", r"points\[0\] needs the keys"),
    ("status: unmeasured\npoints: []\nreference: [{B: 1, M: 2}]", r"reference\[0\] needs the keys"),
])
def test_a_bad_record_is_named(monkeypatch, tmp_path, text, message):
    (tmp_path / "alignment_record.yaml").write_text(text)
    monkeypatch.setattr(alignment_record, "RECORD", tmp_path / "alignment_record.yaml")
    alignment_record._read.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            alignment_record.crossover_points()
    finally:
        alignment_record._read.cache_clear()


def test_work_is_sequences_steps_and_edges():
    assert alignment_record.work((2, 3, 10)) == 600 and math.isclose(alignment_record.work((64, 198, 1586)), 3.1875e10,
                                                                      rel_tol=1e-4)
