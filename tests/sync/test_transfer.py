"""How a pass hands its files to the workers (sync/transfer.py)."""

from __future__ import annotations

from jupyter_gpu_ws.sync.scan import LocalFile
from jupyter_gpu_ws.sync.transfer import SMALL_BATCH, batches_by_folder


def test_small_files_go_in_batches_of_one_folder_each_the_folders_taking_turns() -> None:
    files = [LocalFile(f"d{d}/f{i:04d}.txt", 100, 0) for d in range(3) for i in range(150)]
    batches = batches_by_folder(files)
    folders = [{f.path.split("/")[0] for f in batch} for batch in batches]
    assert all(len(names) == 1 for names in folders)  # never two folders in one batch
    # The batches that run side by side (one per worker) are in different folders.
    assert [names.pop() for names in folders[:3]] == ["d0", "d1", "d2"]
    assert max(len(batch) for batch in batches) == SMALL_BATCH
    assert sorted(f.path for batch in batches for f in batch) == sorted(f.path for f in files)
