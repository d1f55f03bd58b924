"""`dsinfer pull` and `-m hf://...` against a local server that answers as the
Hugging Face hub does (mock_hub.py; no network): a download cut mid-file
resumes with Range and completes; a flipped byte is caught by the hash and the
file never used; 401, 404 and 429 (its Retry-After honoured) answer as they
should; a second pull downloads nothing; a cache written by the
huggingface_hub package is read, and ours is read by it; a split GGUF comes
with its parts and loads as one model, its logits equal to the whole file's;
quantizations pick their file; offline, the cache serves."""

import hashlib
import os
import subprocess
import time

import gguf
import numpy as np
import pytest

from mock_hub import MockHub, Repo
from server_process import DSINFER, STORIES

REPO = "tester/tiny-GGUF"


@pytest.fixture
def hub():
    h = MockHub()
    yield h
    h.stop()


def pull(hub, cache, *args, env=None, check=True):
    environment = dict(os.environ, HF_ENDPOINT=hub.url if hub else "http://127.0.0.1:9", HF_HUB_CACHE=str(cache))
    environment.pop("HF_TOKEN", None)
    environment.pop("HF_HUB_OFFLINE", None)
    environment.update(env or {})
    result = subprocess.run([DSINFER, "pull", *(args or (REPO,))], capture_output=True, text=True, timeout=120, env=environment)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def stories_bytes():
    with open(STORIES, "rb") as f:
        return f.read()


def snapshot_dir(cache, repo, commit):
    return os.path.join(cache, "models--" + repo.replace("/", "--"), "snapshots", commit)


def test_a_cut_download_resumes_and_lands_in_the_cache_layout(hub, tmp_path):
    data = stories_bytes()
    repo = hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": data, "README.md": b"# tiny\n"}, lfs={"tiny-Q4_K_M.gguf"}))
    hub.cut_after[(REPO, "tiny-Q4_K_M.gguf")] = len(data) * 2 // 5
    result = pull(hub, tmp_path)
    path = result.stdout.strip()
    assert path == os.path.join(snapshot_dir(tmp_path, REPO, repo.commit), "tiny-Q4_K_M.gguf")
    with open(path, "rb") as f:
        assert f.read() == data
    gets = hub.gets("tiny-Q4_K_M.gguf")
    assert [g["range"] for g in gets] == [None, f"bytes={len(data) * 2 // 5}-"], gets  # resumed, not started again
    folder = os.path.join(tmp_path, "models--tester--tiny-GGUF")
    sha = hashlib.sha256(data).hexdigest()
    assert os.readlink(path) == f"../../blobs/{sha}"
    assert open(os.path.join(folder, "refs", "main")).read() == repo.commit
    assert os.listdir(os.path.join(folder, "blobs")) == [sha]  # no partial file left


def test_a_cut_download_resumes_in_the_next_pull(hub, tmp_path):
    """A pull that dies mid-file (here: the hub stops answering) leaves its
    partial file; the next pull asks for the rest only."""
    data = stories_bytes()
    hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": data}, lfs={"tiny-Q4_K_M.gguf"}))
    partial = os.path.join(tmp_path, "models--tester--tiny-GGUF", "blobs", hashlib.sha256(data).hexdigest() + ".incomplete")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as f:
        f.write(data[:1000])
    pull(hub, tmp_path)
    assert [g["range"] for g in hub.gets()] == ["bytes=1000-"]


def test_https_verifies_the_hub_against_the_ca_store(tmp_path):
    """A hub behind a certificate the system's CA store does not hold is
    refused; naming its CA (SSL_CERT_FILE, as for Python's clients) is enough."""
    cert, key = tmp_path / "hub.pem", tmp_path / "hub.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    hub = MockHub(certificate=(str(cert), str(key)))
    try:
        hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": stories_bytes()}, lfs={"tiny-Q4_K_M.gguf"}))
        env = {"SSL_CERT_FILE": "", "CURL_CA_BUNDLE": ""}
        result = pull(hub, tmp_path / "cache", env=env, check=False)
        assert result.returncode != 0 and "certificate" in result.stderr.lower(), result.stderr
        path = pull(hub, tmp_path / "cache", env={"SSL_CERT_FILE": str(cert), "CURL_CA_BUNDLE": ""}).stdout.strip()
        assert open(path, "rb").read() == stories_bytes()
    finally:
        hub.stop()


def test_a_flipped_byte_is_caught_and_the_file_not_used(hub, tmp_path):
    data = stories_bytes()
    hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": data}, lfs={"tiny-Q4_K_M.gguf"}))
    hub.corrupt.add((REPO, "tiny-Q4_K_M.gguf"))
    result = pull(hub, tmp_path, check=False)
    assert result.returncode != 0
    assert "do not match the hub's SHA-256 " + hashlib.sha256(data).hexdigest() in result.stderr, result.stderr
    assert "the download was removed and not used" in result.stderr
    folder = os.path.join(tmp_path, "models--tester--tiny-GGUF")
    assert os.listdir(os.path.join(folder, "blobs")) == []
    assert not any(files for _, _, files in os.walk(os.path.join(folder, "snapshots")))
    # A git (non-LFS) file is checked by its blob hash the same way.
    hub.corrupt = {(REPO, "README.md")}
    hub.repos[REPO] = Repo({"README.md": b"# a small file kept in git, not LFS\n" * 10})
    result = pull(hub, tmp_path, REPO + ":README.md", check=False)
    assert result.returncode != 0 and "do not match the hub's git hash" in result.stderr, result.stderr


def test_401_404_and_429(hub, tmp_path):
    hub.add("tester/private", Repo({"m-Q8_0.gguf": b"x" * 100}, token="hf_secret"))
    result = pull(hub, tmp_path, "tester/private", check=False)
    assert result.returncode != 0 and "401 Unauthorized" in result.stderr and "HF_TOKEN is not set" in result.stderr, result.stderr
    result = pull(hub, tmp_path, "tester/private", env={"HF_TOKEN": "hf_wrong"}, check=False)
    assert result.returncode != 0 and "did not accept HF_TOKEN" in result.stderr, result.stderr
    assert pull(hub, tmp_path, "tester/private", env={"HF_TOKEN": "hf_secret"}).stdout.strip().endswith("m-Q8_0.gguf")

    result = pull(hub, tmp_path, "tester/nothing-here", check=False)
    assert result.returncode != 0 and "404 Not Found" in result.stderr, result.stderr
    hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": stories_bytes()}, lfs={"tiny-Q4_K_M.gguf"}))
    result = pull(hub, tmp_path, REPO + ":nope.gguf", check=False)
    assert result.returncode != 0 and "no GGUF file matches 'nope.gguf'" in result.stderr, result.stderr

    # A 429 on the file: the client waits its Retry-After (the hub's clock says when it came back), then downloads.
    hub.log.clear()
    hub.rate_limited["/" + REPO + "/resolve/"] = 2
    pull(hub, tmp_path)
    gets = hub.gets()
    assert len(gets) == 2 and gets[1]["time"] - gets[0]["time"] >= 2, gets
    # One that asks for more than the client waits is an error naming it.
    hub.rate_limited["/api/models/"] = 100000
    result = pull(hub, tmp_path, check=False)
    assert result.returncode != 0 and "429 Too Many Requests" in result.stderr, result.stderr


def test_a_second_pull_downloads_nothing_and_offline_uses_the_cache(hub, tmp_path):
    hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": stories_bytes()}, lfs={"tiny-Q4_K_M.gguf"}))
    first = pull(hub, tmp_path).stdout
    hub.log.clear()
    second = pull(hub, tmp_path)
    assert second.stdout == first and "in the cache" in second.stderr
    assert hub.gets() == []
    # Offline by choice, and with no hub to reach: the cache answers; a repository it lacks is an error.
    assert pull(hub, tmp_path, env={"HF_HUB_OFFLINE": "1"}).stdout == first
    unreachable = pull(None, tmp_path)
    assert unreachable.stdout == first and "cannot reach the hub" in unreachable.stderr
    result = pull(None, tmp_path, "tester/never-pulled", check=False)
    assert result.returncode != 0 and "cannot reach the hub" in result.stderr and "the cache has no tester/never-pulled" in result.stderr


def test_the_huggingface_hub_package_and_dsinfer_share_one_cache(hub, tmp_path):
    import huggingface_hub  # scripts/install_deps.sh installs it
    data = stories_bytes()
    repo = hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": data, "config.json": b'{"model_type": "llama"}'}, lfs={"tiny-Q4_K_M.gguf"}))
    theirs = tmp_path / "theirs"
    path = huggingface_hub.hf_hub_download(REPO, "tiny-Q4_K_M.gguf", cache_dir=str(theirs), endpoint=hub.url)
    hub.log.clear()
    ours = pull(hub, theirs)
    assert os.path.realpath(ours.stdout.strip()) == os.path.realpath(path)
    assert hub.gets() == [], "the package's download is used as it is"

    mine = tmp_path / "mine"
    pull(hub, mine)
    pull(hub, mine, REPO + ":config.json")
    found = huggingface_hub.hf_hub_download(REPO, "tiny-Q4_K_M.gguf", cache_dir=str(mine), local_files_only=True)
    assert open(found, "rb").read() == data
    scan = huggingface_hub.scan_cache_dir(str(mine))
    assert not scan.warnings, scan.warnings
    (cached,) = scan.repos
    assert cached.repo_id == REPO and {f.file_name for r in cached.revisions for f in r.files} == {"tiny-Q4_K_M.gguf", "config.json"}
    assert {r.commit_hash for r in cached.revisions} == {repo.commit} and cached.refs.keys() == {"main"}


def split_gguf(source, prefix, max_tensors):
    """The model written as llama.cpp's gguf-split writes it: PREFIX-0000K-of-0000N.gguf, split.* keys in each part."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(prefix + ".gguf", reader.fields["general.architecture"].contents(), split_max_tensors=max_tensors)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        value = field.contents()
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=list(reversed([int(n) for n in t.shape])), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def logits(model, out):
    subprocess.run([DSINFER, "logits", "-m", model, "--tokens", "1,400,25,300,7,99", "--out", out, "-t", "1"], check=True,
                   capture_output=True, timeout=120)
    return np.load(out)


def test_a_split_gguf_is_pulled_whole_and_loads_as_one_model(hub, tmp_path):
    split_gguf(STORIES, str(tmp_path / "stories"), max_tensors=12)
    parts = sorted(n for n in os.listdir(tmp_path) if n.startswith("stories-"))
    assert len(parts) >= 3 and parts[0] == f"stories-00001-of-{len(parts):05d}.gguf", parts
    files = {n: open(tmp_path / n, "rb").read() for n in parts}
    hub.add(REPO, Repo(dict(files, **{"other-Q8_0.gguf": b"GGUF"}), lfs=set(files)))
    cache = tmp_path / "cache"
    pulled = pull(hub, cache, REPO + ":" + parts[0]).stdout.split()
    assert [os.path.basename(p) for p in pulled] == parts
    # hf:// names the first part; the others are found beside it.
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    split = subprocess.run([DSINFER, "logits", "-m", f"hf://{REPO}/{parts[0]}", "--tokens", "1,400,25,300,7,99", "--out",
                            str(tmp_path / "split.npy"), "-t", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert split.returncode == 0, split.stderr
    whole = logits(STORIES, str(tmp_path / "whole.npy"))
    assert np.array_equal(np.load(tmp_path / "split.npy"), whole)
    # A part missing is named.
    os.remove(tmp_path / parts[-1])
    result = subprocess.run([DSINFER, "info", "-m", str(tmp_path / parts[0])], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and parts[-1] in result.stderr, result.stderr


def test_a_hub_naming_a_file_outside_the_repository_is_refused(hub, tmp_path):
    hub.add(REPO, Repo({"../../../escaped-Q4_K_M.gguf": b"x" * 10}))
    result = pull(hub, tmp_path / "cache", check=False)
    assert result.returncode != 0 and "not a file inside a repository" in result.stderr, result.stderr
    assert not any("escaped" in name for _, _, names in os.walk(tmp_path) for name in names)


def test_a_quantization_picks_its_file(hub, tmp_path):
    hub.add(REPO, Repo({"tiny-Q4_K_M.gguf": b"a" * 10, "tiny-Q8_0.gguf": b"b" * 10, "tiny-IQ4_XS.gguf": b"c" * 10}))
    assert pull(hub, tmp_path).stdout.strip().endswith("/tiny-Q4_K_M.gguf")  # the default, as llama.cpp's -hf
    assert pull(hub, tmp_path, REPO + ":q8_0").stdout.strip().endswith("/tiny-Q8_0.gguf")
    result = pull(hub, tmp_path, REPO + ":Q5_K_M", check=False)
    assert result.returncode != 0 and "tiny-Q8_0.gguf" in result.stderr and "name one" in result.stderr, result.stderr
    hub.add("tester/two", Repo({"a.gguf": b"a", "b.gguf": b"b"}))
    result = pull(hub, tmp_path, "tester/two", check=False)
    assert result.returncode != 0 and "more than one GGUF file" in result.stderr, result.stderr
