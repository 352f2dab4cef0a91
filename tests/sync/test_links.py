"""Symbolic links in the work directory: mirrored as links (rclone's `.rclonelink` files), brought
back as links on a fresh machine, and listed with the reason when they cannot be (pointing
outside, looping); a store written by someone else never gets a link made that leads out."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.links import LINK_SUFFIX
from tests.sync.conftest import s3_server, tree_files, write  # noqa: F401  (s3_server: a fixture)

Make = Callable[..., SyncEngine]


def mirror(store_dir: Path) -> Path:
    return store_dir / "ws" / "files"


def problems(engine: SyncEngine) -> dict[str, str]:
    return {p["path"]: p["reason"] for p in engine.pending_list()["problems"]}


def links_in(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): os.readlink(p) for p in root.rglob("*") if p.is_symlink()
    }


def test_links_inside_come_back_as_links_on_a_fresh_machine(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "data/train.csv", "a,b\n1,2\n")
    write(workdir, "src/model.py", "x = 1\n")
    (workdir / "latest.csv").symlink_to("data/train.csv")  # relative, to a file
    (workdir / "src" / "data").symlink_to("../data", target_is_directory=True)  # to a folder
    (workdir / "model.py").symlink_to(workdir / "src" / "model.py")  # absolute, inside
    (workdir / "later.txt").symlink_to("not-yet-written.txt")  # pointing at nothing yet
    engine = make_engine(workdir)
    report = engine.sync()
    assert report.ok and not problems(engine)
    stored = tree_files(mirror(store_dir))
    assert stored["latest.csv" + LINK_SUFFIX] == b"data/train.csv"
    assert stored["src/data" + LINK_SUFFIX] == b"../data"
    assert stored["model.py" + LINK_SUFFIX] == b"src/model.py"  # stored relative: holds anywhere
    assert stored["later.txt" + LINK_SUFFIX] == b"not-yet-written.txt"
    assert "data/train.csv" in stored and not any(k.startswith("src/data/") for k in stored)
    assert engine.pending() == (0, 0)
    assert engine.sync().uploaded == []  # nothing changed: nothing sent again
    engine.close()

    # A successor machine, the work directory elsewhere.
    fresh = tmp_path / "elsewhere" / "project"
    fresh.mkdir(parents=True)
    second = make_engine(fresh, state="state2")
    restored = second.restore()
    assert not restored.errors
    assert links_in(fresh) == {
        "latest.csv": "data/train.csv",
        "src/data": "../data",
        "model.py": "src/model.py",
        "later.txt": "not-yet-written.txt",
    }
    assert (fresh / "latest.csv").read_text() == "a,b\n1,2\n"
    assert (fresh / "src" / "data" / "train.csv").read_text() == "a,b\n1,2\n"
    assert not (fresh / ("latest.csv" + LINK_SUFFIX)).exists()
    # Recorded as synced: the successor's first pass sends nothing back.
    after = second.sync()
    assert after.ok and after.uploaded == [] and after.deleted == []


def test_a_changed_or_removed_link_reaches_the_store_and_its_old_target_is_kept(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    write(workdir, "b.txt", "b")
    (workdir / "current").symlink_to("a.txt")
    engine = make_engine(workdir)
    engine.sync()
    (workdir / "current").unlink()
    (workdir / "current").symlink_to("b.txt")
    engine.mark_dirty(["current"])  # what the watcher reports: the link's own name
    assert engine.pending() == (1, len(b"b.txt"))
    report = engine.sync(engine.take_dirty())
    assert report.uploaded == ["current" + LINK_SUFFIX]
    assert (mirror(store_dir) / ("current" + LINK_SUFFIX)).read_bytes() == b"b.txt"
    assert [v["size"] for v in engine.versions("current" + LINK_SUFFIX)] == [len(b"a.txt")]
    (workdir / "current").unlink()
    engine.mark_dirty(["current"])
    report = engine.sync(engine.take_dirty())
    assert report.deleted == ["current" + LINK_SUFFIX]
    assert not (mirror(store_dir) / ("current" + LINK_SUFFIX)).exists()


def test_links_that_point_outside_or_loop_are_listed_with_their_reason_and_not_mirrored(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    outside = write(tmp_path / "host", "secret.txt", "secret")
    write(workdir, "notes.md", "notes")
    (workdir / "secret").symlink_to(outside)
    (workdir / "up").symlink_to("../host/secret.txt")
    (workdir / "loop-a").symlink_to("loop-b")
    (workdir / "loop-b").symlink_to("loop-a")
    (workdir / "sub").mkdir()
    (workdir / "sub" / "top").symlink_to("..", target_is_directory=True)  # to a folder above
    (workdir / "via").symlink_to("sub/top/..")  # inside by its words, outside once followed
    write(workdir, "clash" + LINK_SUFFIX, "a file whose name takes the links' suffix")
    (workdir / ("named" + LINK_SUFFIX)).symlink_to("notes.md")  # a link of that name: a link
    engine = make_engine(workdir)
    assert engine.sync().ok
    found = problems(engine)
    assert "pointing outside the work directory" in found["secret"]
    assert str(outside) in found["secret"]
    assert "pointing outside the work directory" in found["up"]
    assert "loops" in found["loop-a"] and "loops" in found["loop-b"]
    assert "through another link" in found["via"]
    assert "holds it" in found["sub/top"]
    assert "rename it" in found["clash" + LINK_SUFFIX]
    assert set(found) == {
        "secret",
        "up",
        "loop-a",
        "loop-b",
        "via",
        "sub/top",
        "clash" + LINK_SUFFIX,
    }
    assert sorted(tree_files(mirror(store_dir))) == ["named" + 2 * LINK_SUFFIX, "notes.md"]

    # Mended: the link points inside now; the next look lists it no more and mirrors it.
    (workdir / "secret").unlink()
    (workdir / "secret").symlink_to("notes.md")
    engine.mark_dirty(["secret"])
    engine.sync(engine.take_dirty())
    assert "secret" not in problems(engine)
    assert (mirror(store_dir) / ("secret" + LINK_SUFFIX)).read_bytes() == b"notes.md"
    # A link that turns to point outside leaves the mirror (kept as a version) and is listed.
    (workdir / "secret").unlink()
    (workdir / "secret").symlink_to(outside)
    engine.mark_dirty(["secret"])
    report = engine.sync(engine.take_dirty())
    assert report.deleted == ["secret" + LINK_SUFFIX]
    assert "pointing outside" in problems(engine)["secret"]
    # A full look finds the same, and forgets what is mended.
    (workdir / "loop-b").unlink()
    engine.sync()
    assert "loop-a" not in problems(engine) and "loop-b" not in problems(engine)
    assert (mirror(store_dir) / ("loop-a" + LINK_SUFFIX)).read_bytes() == b"loop-b"


def test_a_store_written_by_someone_else_never_gets_a_link_made_that_leads_out(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    outside = write(tmp_path / "host", "secret.txt", "secret")
    write(workdir, "notes.md", "notes")
    make_engine(workdir).sync()
    files = mirror(store_dir)
    write(files, "evil" + LINK_SUFFIX, str(outside))  # absolute
    write(files, "up" + LINK_SUFFIX, "../host/secret.txt")
    write(files, "deep/up" + LINK_SUFFIX, "../../../host/secret.txt")
    write(files, "sub/top" + LINK_SUFFIX, "..")  # a folder that holds it: a loop, never made
    write(files, "a/x/keep.txt", "kept")
    write(files, "a/b/c/L" + LINK_SUFFIX, "../../x")  # inside: a/x
    write(files, "q" + LINK_SUFFIX, "a/b/c/L/../../..")  # inside by its words, out once followed
    write(files, "fine" + LINK_SUFFIX, "notes.md")
    write(files, "long" + LINK_SUFFIX, "x" * 5000)
    write(files, "empty" + LINK_SUFFIX, "")
    write(files, "__pycache__/mod.cpython-311.pyc" + LINK_SUFFIX, "../notes.md")  # bytecode
    write(files, ".venv/pyvenv.cfg", "home = /usr/bin")  # an environment: never brought
    write(files, ".venv/lib/python3.11/site-packages/zz.pth", "import os")
    fresh = tmp_path / "fresh" / "work"
    fresh.mkdir(parents=True)
    engine = make_engine(fresh, state="state2")
    report = engine.restore()
    assert links_in(fresh) == {"fine": "notes.md", "a/b/c/L": "../../x"}
    assert (fresh / "fine").read_text() == "notes"
    assert not (fresh / ".venv").exists() and not (fresh / "__pycache__").exists()
    skipped = engine.status()["store_skipped"]
    for name in ("evil", "up", "deep/up", "q", "long", "empty", "sub/top"):
        assert name + LINK_SUFFIX in skipped, name
    assert "outside the work directory" in skipped["evil" + LINK_SUFFIX]
    assert "through another link" in skipped["q" + LINK_SUFFIX]
    assert "holds it" in skipped["sub/top" + LINK_SUFFIX]
    assert "compiled Python" in skipped["__pycache__/mod.cpython-311.pyc" + LINK_SUFFIX]
    assert "Python environment" in skipped[".venv/lib/python3.11/site-packages/zz.pth"]
    assert "fine" + LINK_SUFFIX in report.restored
    assert tree_files(tmp_path / "host") == {"secret.txt": b"secret"}
    # Nothing of these was written anywhere but in the work directory.
    assert sorted(os.listdir(tmp_path / "fresh")) == ["work"]


def test_a_restore_never_writes_through_a_link_here_whoever_made_it(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "notes.md", "notes")
    make_engine(workdir).sync()
    files = mirror(store_dir)
    write(files, "data/planted.txt", "from the store")  # under the user's link to elsewhere
    write(files, "data/deep/x.txt", "from the store")
    write(files, "alias" + LINK_SUFFIX, "realdir")
    write(files, "realdir/a.txt", "a")
    fresh = tmp_path / "fresh"
    outside = tmp_path / "outside"
    outside.mkdir()
    fresh.mkdir()
    (fresh / "data").symlink_to(outside, target_is_directory=True)  # the user's own link
    engine = make_engine(fresh, state="state2")
    first = engine.restore()
    assert list(outside.iterdir()) == []  # nothing written through the user's link
    assert any("data is a symbolic link here" in e for e in first.errors), first.errors
    assert os.readlink(fresh / "alias") == "realdir"
    # The store gains a file under the link the first restore made: it is not written there.
    write(files, "alias/b.txt", "b")
    second = engine.restore()
    assert not (fresh / "realdir" / "b.txt").exists()
    assert any("alias is a symbolic link here" in e for e in second.errors), second.errors


def test_restore_never_replaces_what_is_here_with_a_link(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    (workdir / "current").symlink_to("a.txt")
    make_engine(workdir).sync()
    fresh = tmp_path / "fresh"
    write(fresh, "current", "my own file")
    engine = make_engine(fresh, state="state2")
    engine.restore()
    assert (fresh / "current").read_text() == "my own file" and not (fresh / "current").is_symlink()
    assert (
        "something else of that name" in engine.status()["store_skipped"]["current" + LINK_SUFFIX]
    )


@pytest.mark.usefixtures("s3_env")
def test_links_round_trip_through_an_object_store(
    workdir: Path, tmp_path: Path, s3_url: str, make_engine: Make
) -> None:
    write(workdir, "data/x.bin", b"\x00\x01")
    (workdir / "x").symlink_to("data/x.bin")
    first = make_engine(workdir, store_url=s3_url)
    assert first.sync().ok
    first.close()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    second = make_engine(fresh, store_url=s3_url, state="state2")
    assert not second.restore().errors
    assert links_in(fresh) == {"x": "data/x.bin"}
    assert (fresh / "x").read_bytes() == b"\x00\x01"
