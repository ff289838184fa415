"""autograder.compile_seed: workers start torch.compile warm, each from its own copy of the grader's cache."""

import os

import pytest

from autograder import compile_seed, harness, sandbox, skeleton
from autograder.skeleton import Plan


def test_only_cells_that_compile_get_a_seed():
    assert compile_seed.uses_compile(["import torch\n", "fast = torch.compile(slow)\n"])
    assert not compile_seed.uses_compile(["import torch\n", "def f(x):\n    return x + 1\n"])


def test_a_seed_that_cannot_be_built_leaves_workers_cold(tmp_path, monkeypatch):
    """The warm-up fails (no C++ compiler, say): no seed, and a worker's folder gets nothing (it compiles cold, as without seeds)."""
    monkeypatch.setenv(compile_seed.SEED_ENV, str(tmp_path / "seeds"))
    monkeypatch.setattr(compile_seed, "_WARM_UP", "raise SystemExit('no C++ compiler')")
    compile_seed.seed_folder.cache_clear()
    try:
        assert compile_seed.seed() is None
        (tmp_path / "work").mkdir()
        compile_seed.copy_into(tmp_path / "work")
        assert list((tmp_path / "work").iterdir()) == []
        assert [path.name for path in (tmp_path / "seeds").iterdir()] == [".lock"], "a failed build leaves nothing half made"
    finally:
        compile_seed.seed_folder.cache_clear()


def test_only_the_newest_seeds_are_kept(tmp_path):
    for age, name in enumerate(["newest", "newer", "new", "old", "older"]):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1e9 - age * 1000, 1e9 - age * 1000))
    (tmp_path / ".lock").touch()
    compile_seed._prune(tmp_path, keep=3)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".lock", "new", "newer", "newest"]


@pytest.mark.slow
def test_a_reduced_worker_gets_a_copy_and_no_shared_file(tmp_path):
    """Without a sandbox user (reduced isolation) the worker runs as the grader: it gets a copy of the cache
    and no link to the seed's headers, which it could otherwise make writable for everyone."""
    seed = compile_seed.seed()
    if seed is None:
        pytest.skip("no C++ compiler for torch.compile on this machine")
    compile_seed.copy_into(tmp_path)
    copied = sorted(path.relative_to(tmp_path / compile_seed.WORKER_CACHE) for path in (tmp_path / compile_seed.WORKER_CACHE).rglob("*"))
    assert copied == sorted(path.relative_to(seed / compile_seed.CACHE) for path in (seed / compile_seed.CACHE).rglob("*"))
    assert [path.name for path in tmp_path.iterdir()] == [compile_seed.WORKER_CACHE]


@pytest.mark.slow
@pytest.mark.skipif(not sandbox.namespaces_available(), reason="needs root and namespaces (a sandbox user of its own)")
def test_a_sandboxed_worker_compiles_warm_and_cannot_change_the_shared_headers(tmp_path):
    """The student's compile finds the seeded headers where Inductor looks (so it builds none of its own),
    and every attempt to change the shared header file fails."""
    seed = compile_seed.seed()
    if seed is None:
        pytest.skip("no C++ compiler for torch.compile on this machine")
    [shared] = (seed / compile_seed.HEADERS).glob("*.gch")
    cell = (
        "import os\nimport torch\nfrom torch._inductor import codecache\n\n"
        "fused = torch.compile(lambda x: torch.sin(x) * 2 + 1)\n\n"
        "def attempts():\n"
        "    x = torch.randn(64)\n"
        "    assert torch.allclose(fused(x), torch.sin(x) * 2 + 1, atol=1e-6)  # vectorised sin may differ by an ulp\n"
        "    folder = codecache._HEADER_DIR\n"
        "    headers = sorted(name for name in os.listdir(folder) if name.endswith('.gch'))\n"
        "    outcomes = []\n"
        "    for attempt in (lambda path: open(path, 'r+b').write(b'x'), lambda path: os.chmod(path, 0o666),\n"
        "                    lambda path: os.utime(path, None)):\n"
        "        try:\n"
        "            attempt(os.path.join(folder, headers[0]))\n"
        "            outcomes.append('changed')\n"
        "        except PermissionError:\n"
        "            outcomes.append('refused')\n"
        "    return folder, headers, outcomes\n"
    )
    test = (f"folder, headers, outcomes = attempts()\nassert headers == [{shared.name!r}], f'headers of its own: {{headers}}'\n"
            "assert outcomes == ['refused'] * 3, outcomes\nprint(folder, headers)\n")
    plan = Plan(context=[], student_cells=[cell], items=[skeleton.TestItem("test_attempts", 1.0, test)], api_names=["attempts"])
    (tmp_path / "work").mkdir()
    [item] = harness.grade(plan, tmp_path / "work").items
    assert item.outcome == "passed", item.message
    assert str(tmp_path / "work") in item.output and shared.name in item.output, item.output
    [linked] = (tmp_path / "work").glob(f"torchinductor_uid_*/{compile_seed.HEADERS}/*.gch")
    assert os.path.samefile(linked, shared), "the worker used the seed's headers, not headers of its own"
    # Every header in the worker's folder is the seed's own file (counting the seed's links instead races with
    # gradings in other test workers, which link and remove theirs meanwhile: 12 links seen where 14 were expected).
    own = list((tmp_path / "work").glob(f"torchinductor_uid_*/{compile_seed.HEADERS}/*.h*"))
    assert own and all(os.path.samefile(path, seed / compile_seed.HEADERS / path.name) for path in own), own


@pytest.mark.slow
def test_a_notebook_kernel_compiles_warm_in_the_default_cache(tmp_path, monkeypatch):
    """warm_default_cache fills TMPDIR/torchinductor_<user> from the seed once; a process compiling there
    (as a lecture's kernel does, no TORCHINDUCTOR_CACHE_DIR) uses the seed's headers and builds none."""
    import getpass
    import subprocess
    import sys
    import tempfile

    seed = compile_seed.seed()
    if seed is None:
        pytest.skip("no C++ compiler for torch.compile on this machine")
    monkeypatch.delenv(compile_seed.CACHE_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    compile_seed.warm_default_cache()
    default = tmp_path / f"torchinductor_{getpass.getuser()}"
    headers = {path.name: path.stat().st_mtime_ns for path in (default / compile_seed.HEADERS).glob("*.h*")}
    assert sorted(headers) == sorted(path.name for path in (seed / compile_seed.HEADERS).glob("*.h*")) != []
    compile_seed.warm_default_cache()  # once: an existing cache is left as it is
    compiled = ("import torch\nfused = torch.compile(lambda x: torch.cos(x) * 3)\nx = torch.randn(32)\n"
                "assert torch.allclose(fused(x), torch.cos(x) * 3, atol=1e-6)\n")
    subprocess.run([sys.executable, "-c", compiled], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = {path.name: path.stat().st_mtime_ns for path in (default / compile_seed.HEADERS).glob("*.h*")}
    assert after == headers, "it built headers of its own"
