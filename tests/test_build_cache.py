"""tests/build_cache.py's pruning: build folders of deleted clones go, the others stay."""

from __future__ import annotations

from build_cache import prune_gone_checkouts


def test_build_folders_of_deleted_checkouts_are_pruned(tmp_path):
    builds, live_checkout = tmp_path / "builds", tmp_path / "live-clone"
    live_checkout.mkdir()
    for name, target in (("live", live_checkout), ("gone", tmp_path / "deleted-clone")):
        (builds / name / "kernel-tests").mkdir(parents=True)
        (builds / name / "checkout").symlink_to(target, target_is_directory=True)
    (builds / "unlinked" / "kernel-tests").mkdir(parents=True)  # a first build still making its link
    assert prune_gone_checkouts(builds) == [builds / "gone"]
    assert sorted(p.name for p in builds.iterdir()) == ["live", "unlinked"]
    assert (builds / "live" / "kernel-tests").is_dir() and live_checkout.is_dir()  # nothing followed the links
