"""Where the tests' builds and downloads live: outside the checkout, in venvs.CACHE, so that a fresh
clone (CI) or a `git clean` keeps them, and compiled through ccache (scripts/setup.sh --test installs
it) so that another checkout of the same sources compiles nothing again. One place to wipe: CACHE.

Layout of CACHE:
  builds/<checkout>/        build_cache(name): this checkout's CMake build folders
  builds/<checkout>/checkout  a link to the checkout: what those builds read their sources through
                            (a folder whose link dangles, its clone deleted, is removed on the next build)
  ccache/                   the compiler cache of every build (CCACHE_DIR)
  <name>/                   shared_cache(name): what does not depend on a checkout (downloads, ...)

Why one set of build folders per checkout (<checkout> = its folder name and a hash of its path): a
CMake build folder records its source folder and ninja trusts time stamps, so a folder shared by two
checkouts would reconfigure back and forth and keep objects built from the other checkout's files
when those are newer. Why the link: ccache hashes the compile command, where the source and include
paths are absolute; with CCACHE_BASEDIR = builds/<checkout> it rewrites the paths under it relative
to the build folder, and through the link those are the same in every checkout
(../../checkout/customops/...), so a new clone's first build is served from the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from pathlib import Path

from venvs import CACHE

REPO = Path(__file__).resolve().parents[1]
CHECKOUT_KEY = f"{REPO.name}-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}"
CHECKOUT_BUILDS = CACHE / "builds" / CHECKOUT_KEY
CHECKOUT_LINK = CHECKOUT_BUILDS / "checkout"
CCACHE_DIR = CACHE / "ccache"


def build_cache(name: str) -> Path:
    """builds/<checkout>/<name>, created: a build folder (or a parent of several) of this checkout.
    Concurrent sessions of one checkout building the same folder take venvs.locked(<folder>.lock)."""
    _link_checkout()
    _prune_once()
    folder = CHECKOUT_BUILDS / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shared_cache(name: str) -> Path:
    """CACHE/<name>, created: for what no checkout's files go into (a download, a build from a copy
    synced by content at a fixed path), which every checkout may reuse."""
    folder = CACHE / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def prune_gone_checkouts(builds: Path) -> list[Path]:
    """Removes the build folders under ``builds`` whose checkout link points at a folder that is gone
    (a deleted clone: nothing can build there again, and each holds ~100 MB of objects); returns them.
    A folder without its link yet (being made) or whose checkout exists is left alone."""
    gone = [folder for folder in sorted(builds.iterdir()) if folder.is_dir() and not folder.is_symlink()
            and (folder / "checkout").is_symlink() and not (folder / "checkout").exists()]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)  # another session may be pruning the same one
    return gone


@functools.cache  # once per session
def _prune_once() -> None:
    prune_gone_checkouts(CHECKOUT_BUILDS.parent)


def _link_checkout() -> None:
    """builds/<checkout>/checkout -> the checkout (replaced atomically: another session may be reading it)."""
    if CHECKOUT_LINK.is_symlink() and Path(os.readlink(CHECKOUT_LINK)) == REPO:
        return
    CHECKOUT_BUILDS.mkdir(parents=True, exist_ok=True)
    fresh = CHECKOUT_BUILDS / f".checkout-{os.getpid()}"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(REPO, target_is_directory=True)
    os.replace(fresh, CHECKOUT_LINK)


def via_checkout_link(path: Path) -> Path:
    """`path` as CMake should be given it: a path inside the checkout spelled through the link (see
    the module's docstring: the compile commands of every checkout are then the same); others as they are."""
    path = Path(path).resolve()
    if not path.is_relative_to(REPO):
        return path
    _link_checkout()
    return CHECKOUT_LINK / path.relative_to(REPO)


def ccache_cmake_args() -> list[str]:
    """CMake's compiler launchers: ccache where installed, else none (an empty value also clears a
    launcher an earlier configure of the same build folder recorded)."""
    launcher = shutil.which("ccache") or ""
    return [f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"]


def ccache_env() -> dict[str, str]:
    """The environment to run the builds of build_cache's folders in: ccache rewrites the absolute
    paths under builds/<checkout> (the build folders, the link, copies of sources made there)
    relative to the build folder, and keeps its cache in CACHE/ccache."""
    return {**os.environ, "CCACHE_BASEDIR": str(CHECKOUT_BUILDS), "CCACHE_DIR": str(CCACHE_DIR)}
