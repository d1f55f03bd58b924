"""The prefix cache's disk tier (`serve --kv-disk-dir`): a prompt's pages
read back after a restart with logprobs identical to computing them, tenants
kept apart, damaged pages (a flipped bit, a truncated file) and another
setting's pages never used, a SIGKILL amid writes, a full disk and a
read-only directory degrading to no writes, and the directory within its
budget. Times are never asserted: what shows a hit is the usage's
cached_tokens and the tier's counters."""

import concurrent.futures
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import time
import urllib.request

import pytest

from server_process import DSINFER, STORIES, ServerProcess

PAGE = 16  # stories260K's KV page, in tokens


def complete(server, prompt, key="sk-alpha"):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 3}).encode()
    request = urllib.request.Request(server.base + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=60) as r:
        reply = json.loads(r.read())
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"], reply["choices"][0]["logprobs"]


def prompt_of(seed, pages=15):
    return [random.Random(seed).randrange(3, 500) for _ in range(pages * PAGE + 1)]


def page_files(directory):
    return [n for n in os.listdir(directory) if n.endswith(".kvpage")]


def chains(directory):
    """The page files as prefixes, each in position order: a file's header
    holds its key and its parent's (kv_disk_tier.cpp: magic, fingerprint, key, parent)."""
    by_parent = {}
    for name in page_files(directory):
        with open(os.path.join(directory, name), "rb") as f:
            header = f.read(32)
        key, parent = struct.unpack("<QQ", header[16:32])
        by_parent.setdefault(parent, []).append((key, name))
    found = []
    for key, name in by_parent.get(0, []):
        chain = [name]
        while key in by_parent:
            key, name = by_parent[key][0]
            chain.append(name)
        found.append(chain)
    return found


def serve(directory, *extra):
    return ServerProcess("--kv-disk-dir", str(directory), "--kv-disk-bytes", "64MiB", "--ctx-size", "512", *extra)


@pytest.fixture
def keys(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("sk-alpha alpha\nsk-beta beta\n")
    return str(path)


def test_a_restart_reads_the_prefix_back_and_tenants_stay_apart(tmp_path, keys):
    directory, prompt = tmp_path / "kv", prompt_of(1)
    first = serve(directory, "--api-keys", keys)
    try:
        cached, cold = complete(first, prompt)
        assert cached == 0
    finally:
        first.stop()
    second = serve(directory, "--api-keys", keys)
    try:
        cached, again = complete(second, prompt)
        assert cached == 15 * PAGE and again == cold, "every full page but the last token's read back, the same logprobs"
        assert second.metric("dsinfer:kv_disk_hits") == 15
        cached, theirs = complete(second, prompt, key="sk-beta")
        assert cached == 0 and theirs == cold, "tenant beta never finds alpha's pages, on disk or in the pool"
        assert second.metric("dsinfer:kv_disk_hits") == 15
    finally:
        second.stop()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun (scripts/install_deps.sh)")
def test_a_restart_in_two_ranks_reads_every_ranks_part_back(tmp_path):
    """serve --tensor-parallel 2: each page on disk is both ranks' parts of it (stories260K's KV heads are split),
    gathered from rank 1 when written and sent back when read. After a restart in two ranks the prompt's full
    pages come back with the same logprobs as computed; one process, whose pages hold every head, never reads
    the two ranks' files (another fingerprint)."""
    directory, prompt = tmp_path / "kv", prompt_of(3)
    two_ranks = ("--tensor-parallel", "2", "-t", "1")
    first = serve(directory, *two_ranks)
    try:
        cached, cold = complete(first, prompt)
        assert cached == 0
    finally:
        first.stop()
    second = serve(directory, *two_ranks)
    try:
        cached, again = complete(second, prompt)
        assert cached == 15 * PAGE and again == cold
        assert second.metric("dsinfer:kv_disk_hits") == 15
    finally:
        second.stop()
    one = serve(directory)
    try:
        assert complete(one, prompt)[0] == 0
    finally:
        one.stop()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun (scripts/install_deps.sh)")
@pytest.mark.parametrize("family", ["deepseek2", "deepseek4"])
def test_a_row_every_rank_keeps_goes_to_disk_once(tmp_path, family):
    """MLA's latent row and V4's row (with its window pages) are whole on every rank: a page on disk is rank 0's,
    and reading it back writes it into every rank's pages. `bench --concurrency --kv-disk-dir` in two ranks
    serves its requests again from the tier: the same greedy outputs as computed."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    if family == "deepseek2":
        from make_deepseek2 import write_deepseek2
        model, prompt_len = write_deepseek2(str(tmp_path / "v2.gguf"), shape="v2lite", n_layer=2, seed=5), 64
    else:
        from make_deepseek4 import write_deepseek4
        model, prompt_len = write_deepseek4(str(tmp_path / "v4.gguf"), seed=5), 300
    out = subprocess.run([DSINFER, "bench", "-m", model, "--tensor-parallel", "2", "-t", "1", "--concurrency", "4", "--requests", "8",
                          "--prompt-len", str(prompt_len), "--gen-len", "16", "--kv-disk-dir", str(tmp_path / "kv")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("kv disk tier:"))
    assert "greedy outputs identical: yes" in line and " 0 pages read" not in line, line


def test_deepseek_v4_reads_back_its_window_and_compressor_state(tmp_path):
    """DeepSeek-V4 (a random model of make_deepseek4's shape: a window of 16, layers compressing by 4 and by
    128, pages of 64): its tier files carry each block's window page (raw rows, compressor projections)
    beside its page. After a restart, a prompt sharing three pages with one computed before reads them back
    and goes on from their window and compressor state (the ratio-128 block 128..255 is half on disk, half
    computed): its logprobs equal a cold computation on a server without the tier; the first prompt reads
    all its full pages back, with the same logprobs as computed."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    from make_deepseek4 import write_deepseek4
    model = write_deepseek4(str(tmp_path / "v4.gguf"), seed=11, indexer_heads=16)
    v4_page = 64
    directory = tmp_path / "kv"
    first_prompt = prompt_of(21, pages=5 * v4_page // PAGE)
    second_prompt = first_prompt[: 3 * v4_page] + prompt_of(22, pages=2 * v4_page // PAGE)
    v4 = lambda *extra: ServerProcess("--ctx-size", "1024", *extra, model=model)
    tier = ("--kv-disk-dir", str(directory), "--kv-disk-bytes", "64MiB")

    def computed(server, prompt):
        """The prompt's logprobs on a server that has seen nothing yet (then stopped)."""
        try:
            cached, logprobs = complete(server, prompt)
            assert cached == 0
            return logprobs
        finally:
            server.stop()
    second_cold = computed(v4(), second_prompt)  # no tier at all
    first_cold = computed(v4(*tier), first_prompt)  # writes its pages
    second = v4(*tier)
    try:
        cached, second_again = complete(second, second_prompt)
        assert cached == 3 * v4_page and second_again == second_cold, "three pages and their window state read back"
        cached, first_again = complete(second, first_prompt)
        assert cached == 5 * v4_page and first_again == first_cold
        assert second.metric("dsinfer:kv_disk_corrupt_pages") == 0
    finally:
        second.stop()


def test_damaged_pages_and_another_settings_pages_are_never_used(tmp_path):
    directory, prompt = tmp_path / "kv", prompt_of(2)
    first = serve(directory)
    try:
        _, cold = complete(first, prompt)
    finally:
        first.stop()
    pages = next(chain for chain in chains(directory) if len(chain) == 15)  # the prompt's (the start's probe wrote 4)
    with open(directory / pages[0], "r+b") as f:  # a flipped bit in the first page's payload
        f.seek(2000)
        byte = f.read(1)
        f.seek(2000)
        f.write(bytes([byte[0] ^ 0x04]))
    second = serve(directory)
    try:
        cached, answer = complete(second, prompt)
        assert cached == 0 and answer == cold
        assert second.metric("dsinfer:kv_disk_corrupt_pages") == 1
    finally:
        second.stop()
    os.truncate(directory / pages[5], os.path.getsize(directory / pages[5]) // 2)  # torn
    third = serve(directory)
    try:
        cached, answer = complete(third, prompt)
        assert cached == 5 * PAGE and answer == cold, "the pages before the torn one, then computed"
        assert third.metric("dsinfer:kv_disk_corrupt_pages") == 1
    finally:
        third.stop()
    before = len(page_files(directory))
    other = serve(directory, "--kv-cache-dtype", "f32")  # another setting: another fingerprint
    try:
        assert other.metric("dsinfer:kv_disk_foreign_files") == before
        cached, _ = complete(other, prompt)
        assert cached == 0 and other.metric("dsinfer:kv_disk_hits") == 0
    finally:
        other.stop()


def test_a_kill_amid_writes_leaves_nothing_wrong(tmp_path):
    directory = tmp_path / "kv"
    prompts = [prompt_of(10 + i) for i in range(6)]
    first = serve(directory)
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            colds = list(pool.map(lambda p: complete(first, p)[1], prompts))
        killed = first.process.pid
        first.process.send_signal(signal.SIGKILL)  # the writer may be mid-file
        first.process.wait()
    finally:
        first.stop()
    second = serve(directory)
    try:
        for prompt, cold in zip(prompts, colds):
            _, answer = complete(second, prompt)
            assert answer == cold
        # The killed writer's temporary files are gone (the second server's own may be mid-write).
        assert not [n for n in os.listdir(directory) if n.startswith(f".tmp-{killed}-")]
    finally:
        second.stop()


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_then_a_read_only_one_degrade_to_no_writes(small_disk):
    prompt = prompt_of(3)
    first = serve(small_disk)
    try:
        cached, cold = complete(first, prompt)
        assert cached == 0
        deadline = time.time() + 30  # the pages are written in the background: guards against a hang only
        while first.metric("dsinfer:kv_disk_writes_disabled") != 1:
            assert time.time() < deadline, "the full disk did not stop the writes"
            time.sleep(0.05)
        assert "no more pages are written" in first.output()
        assert complete(first, prompt_of(4))[0] == 0  # requests go on
    finally:
        first.stop()
    written = len(page_files(small_disk))
    assert written > 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    second = serve(small_disk)
    try:
        cached, answer = complete(second, prompt)
        assert answer == cold and cached % PAGE == 0
        assert second.metric("dsinfer:kv_disk_writes_disabled") == 1
    finally:
        second.stop()


def test_bench_reports_prefill_computed_and_read_back(tmp_path):
    out = subprocess.run([os.environ.get("DSINFER", os.path.join(os.path.dirname(__file__), "..", "..", "build", "dsinfer")), "bench",
                          "-m", STORIES, "--concurrency", "2", "--requests", "4", "--prompt-len", "200", "--gen-len", "8",
                          "--kv-disk-dir", str(tmp_path / "kv")], capture_output=True, text=True, timeout=300, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("kv disk tier:"))
    assert "greedy outputs identical: yes" in line and "0 corrupt" in line
    read_back = int(line.split(" of ")[0].split()[-1])
    assert read_back == 4 * 12 * PAGE, line  # every request's full pages (200 prompt tokens: 12 pages and 8 tokens)


def test_the_directory_stays_within_its_budget(tmp_path):
    directory, budget = tmp_path / "kv", 100 * 1024
    server = ServerProcess("--kv-disk-dir", str(directory), "--kv-disk-bytes", str(budget), "--ctx-size", "512")
    try:
        for i in range(10):  # 150 pages of about 10 KB: fifteen times the budget
            complete(server, prompt_of(100 + i))
        assert server.metric("dsinfer:kv_disk_pages_evicted") > 0
    finally:
        server.stop()
    assert sum(os.path.getsize(directory / n) for n in os.listdir(directory)) <= budget
