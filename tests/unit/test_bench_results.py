"""`bench.run_all` rewrites bench/RESULTS.md's table and keeps the sections written after it."""

from bench.run_all import with_notes


def test_a_full_run_replaces_the_table_and_keeps_the_written_sections():
    existing = "# Baton benchmarks\n\nold table\n\n## Where a turn's time goes\n\nanalysis\n\n## Cluster\n\nmore\n"
    merged = with_notes("# Baton benchmarks\n\nnew table\n", existing)
    kept = "\n## Where a turn's time goes\n\nanalysis\n\n## Cluster\n\nmore\n"
    assert merged == "# Baton benchmarks\n\nnew table\n" + kept


def test_a_first_run_writes_the_table_alone():
    assert with_notes("# Baton benchmarks\n\ntable\n", "") == "# Baton benchmarks\n\ntable\n"
