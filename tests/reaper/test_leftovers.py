"""Leftovers in /dev/shm-like and temp directories: removed only when nobody uses them."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from airvisor.reaper import find_leftovers, remove_leftovers

planting: Any = sys.modules["airvisor_test_planting"]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_unused_old_leftovers_are_removed_and_the_rest_kept(
    tmp_path: Path, planter: Any
) -> None:
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    dead = shm / "psm_dead01"
    dead.write_bytes(b"\0" * 64)
    sem = shm / "sem.mp-abc123"
    sem.write_bytes(b"\0" * 32)
    young = shm / "psm_young"
    young.write_bytes(b"x")
    held = shm / "psm_held"
    held.write_bytes(b"\0" * 4096)
    mapped = shm / "vllm-mapped"
    mapped.write_bytes(b"\0" * 4096)
    foreign = shm / "psm_foreign"
    foreign.write_bytes(b"x")
    os.chown(foreign, 65534, 65534)
    unrelated = shm / "postgres.1234"
    unrelated.write_bytes(b"x")
    dist = tmp / "vllm_dist_1a2b"
    (dist / "sub").mkdir(parents=True)
    (dist / "sub" / "store").write_text("x")
    elastic_in_use = tmp / "torchelastic_xyz"
    elastic_in_use.mkdir()
    inductor = tmp / "torchinductor_root"
    inductor.mkdir()
    for path in (dead, sem, held, mapped, foreign, unrelated, dist, elastic_in_use, inductor):
        _age(path, 3600)

    # Live processes: one holds `held` open, one has `mapped` mapped, one has its cwd in
    # `elastic_in_use`.
    holder = planter.spawn([sys.executable, "-c",
                            f"f = open({str(held)!r}, 'rb'); import time; time.sleep(60)"])
    mapper = planter.spawn([sys.executable, "-c",
                            "import mmap, time\n"
                            f"f = open({str(mapped)!r}, 'r+b')\n"
                            "m = mmap.mmap(f.fileno(), 4096)\nf.close()\ntime.sleep(60)"])
    in_dir = planter.spawn(["sleep", "60"], cwd=elastic_in_use)

    def ready() -> bool:
        try:  # (an fd listed can close before it is read while the interpreter starts)
            fds = {os.readlink(f"/proc/{holder.pid}/fd/{fd}")
                   for fd in os.listdir(f"/proc/{holder.pid}/fd")}
            maps = Path(f"/proc/{mapper.pid}/maps").read_text()
            cwd = os.readlink(f"/proc/{in_dir.pid}/cwd")
        except OSError:
            return False
        return str(held) in fds and str(mapped) in maps and cwd == str(elastic_in_use)

    planting.wait_until(ready, what="holders in place")

    found = find_leftovers(shm_dir=shm, tmp_dir=tmp)
    assert {Path(lo.path).name for lo in found} == {
        "psm_dead01", "sem.mp-abc123", "psm_young", "psm_held", "vllm-mapped", "psm_foreign",
        "vllm_dist_1a2b", "torchelastic_xyz"}

    # The directories are this test's own, so every process that could use them is visible.
    dry = remove_leftovers(found, min_age=10, dry_run=True, full_view=True)
    assert dead.exists() and sorted(map(os.path.basename, dry.removed)) == [
        "psm_dead01", "sem.mp-abc123", "vllm_dist_1a2b"]

    blind = remove_leftovers(found, min_age=10, full_view=False)
    assert blind.removed == [] and dead.exists()
    assert all("invisible" in why for _, why in blind.kept)

    result = remove_leftovers(found, min_age=10, full_view=True)
    assert sorted(map(os.path.basename, result.removed)) == [
        "psm_dead01", "sem.mp-abc123", "vllm_dist_1a2b"]
    assert not dead.exists() and not sem.exists() and not dist.exists()
    kept = {os.path.basename(path): why for path, why in result.kept}
    assert "in use" in kept["psm_held"]
    assert "in use" in kept["vllm-mapped"]
    assert "in use" in kept["torchelastic_xyz"]
    assert "old" in kept["psm_young"]
    assert "uid 65534" in kept["psm_foreign"]
    for path in (young, held, mapped, foreign, unrelated, elastic_in_use, inductor):
        assert path.exists()
