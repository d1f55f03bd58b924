"""Crafted model files against the real binary: for every metadata key the
loaders read (as `dsinfer info --keys-read` lists them, so a key added to a
loader is covered without editing this test), a file with that key of the
wrong type, with absurd values, and, for arrays, empty, short, mistyped and
huge. Each must end in a clear refusal naming the key or a normal run; never
a signal, and peak memory below 4x the file's size + 64 MiB.

DSINFER points at the binary (build-asan/dsinfer in CI's sanitizer pass,
where the memory bound is not checked: ASan's shadow memory is not ours)."""

import concurrent.futures
import math
import os
import struct
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import gguf_craft as g  # noqa: E402
from server_process import DSINFER, STORIES  # noqa: E402

ASAN = "asan" in DSINFER
MAX_VOCAB = 1 << 19  # src/tokenizer/vocab.cpp


def measured(*command):
    """Runs a command; returns (exit status, or -N for signal N; stderr; peak RSS bytes). GNU time
    measures the peak: this process's own rusage of a child would count the pages the child shared
    with pytest before its exec."""
    report = command[-1] + ".time"  # beside the model file, the last argument
    result = subprocess.run(["/usr/bin/time", "-o", report, "-f", "peak_rss_kib=%M exit=%x", DSINFER, *command],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    lines = open(report).read().split("\n")
    fields = dict(item.split("=") for item in [line for line in lines if line.startswith("peak_rss_kib=")][0].split())
    signal = [line for line in lines if line.startswith("Command terminated by signal")]
    rc = -int(signal[0].split()[-1]) if signal else int(fields["exit"])
    return rc, result.stderr.decode(errors="replace"), int(fields["peak_rss_kib"]) * 1024


def check(path, key, must_refuse, label, problems):
    """Runs every loader on the file (`info --keys-read`) and, when they accept it, a two-token
    generation; appends what is wrong to `problems`; returns the loaders' exit status."""
    size = os.path.getsize(path)
    limit = 4 * size + (64 << 20)
    rc, stderr, peak = measured("info", "--keys-read", "-m", path)
    runs = [("load", rc, peak)]
    if rc == 0:
        run_rc, run_stderr, run_peak = measured("run", "-p", "Once upon a time", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
        runs.append(("run", run_rc, run_peak))
        if run_rc not in (0, 1):
            problems.append(f"{key} {label}: run exit {run_rc} (a signal?): {run_stderr[-500:]}")
        elif run_rc == 1:  # a value the loaders let through but generation refuses must still say what it is
            rc, stderr = run_rc, run_stderr
    last_line = (stderr.strip().split("\n")[-1] if stderr.strip() else "")[:300]
    print(f"{os.path.basename(path)}: {key} {label}: " +
          ", ".join(f"{what} exit {code} peak {p / 2**20:.1f} MiB" for what, code, p in runs) + f" (limit {limit / 2**20:.1f})")
    if rc not in (0, 1):
        problems.append(f"{key} {label}: exit {rc} (a signal?): {last_line}")
    elif must_refuse and rc != 1:
        problems.append(f"{key} {label} was accepted")
    elif rc == 1 and key not in stderr and "tensor '" not in stderr:  # a value contradicting a tensor's shape names the tensor
        problems.append(f"{key} {label}: the refusal does not name the key: {last_line}")
    if not ASAN:
        for what, _, p in runs:
            if p >= limit:
                problems.append(f"{key} {label}: {what} peak RSS {p} over {limit}")
    return rc


def check_crafted(base, key, field, path, *args):
    """check() on the base with `key` set to `field` (None: removed), written to `path` and removed after."""
    crafted = base.copy()
    if field is None:
        del crafted.fields[key]
    else:
        crafted.fields[key] = field
    g.write(crafted, path)
    try:
        return check(path, key, *args)
    finally:
        os.remove(path)


def variants(field):
    """(label, replacement field, must be refused) for a key present in the file."""
    out = []
    if field.type == g.STRING:
        out += [("as u32", g.Field(g.U32, 7), True), ("empty", g.Field(g.STRING, ""), False),
                ("1 MiB", g.Field(g.STRING, "x" * (1 << 20)), False)]
    elif field.type == g.ARRAY:
        out += [("as string", g.Field(g.STRING, "x"), True), ("empty", g.Field(g.ARRAY, [], field.element_type), True),
                ("one short", g.Field(g.ARRAY, field.value[:-1], field.element_type), False)]
        if field.element_type == g.STRING:
            out += [("of u32", g.Field(g.ARRAY, [1] * len(field.value), g.U32), True),
                    ("huge", g.Field(g.ARRAY, g.encoded_strings([b"%d" % i for i in range(MAX_VOCAB + 1)]), g.STRING), True)]
        else:
            out += [("of strings", g.Field(g.ARRAY, ["x"] * len(field.value), g.STRING), True),
                    ("huge", g.Field(g.ARRAY, g.encoded_numbers("<i", MAX_VOCAB + 1), g.I32), True)]
            if field.element_type in g.FLOAT_TYPES:
                out.append(("with NaN", g.Field(g.ARRAY, [math.nan] * len(field.value), g.F32), True))
    elif field.type == g.BOOL:
        out += [("as string", g.Field(g.STRING, "true"), True), ("as u8", g.Field(g.U8, 1), True)]
    elif field.type in g.INTEGER_TYPES:
        out += [("as string", g.Field(g.STRING, "x"), True), ("as f32", g.Field(g.F32, 1.5), True),
                ("0", g.Field(g.U32, 0), False), ("u32 max", g.Field(g.U32, 2**32 - 1), False),
                ("2^63", g.Field(g.U64, 2**63), False), ("-1", g.Field(g.I32, -1), False)]
    elif field.type in g.FLOAT_TYPES:
        out += [("as string", g.Field(g.STRING, "x"), True), ("as u32", g.Field(g.U32, 1), True),
                ("NaN", g.Field(g.F32, math.nan), True), ("inf", g.Field(g.F64, math.inf), True),
                ("-1", g.Field(g.F32, -1.0), False), ("0", g.Field(g.F32, 0.0), False), ("1e308", g.Field(g.F64, 1e308), True)]
    return out


# Values of three types for a key the file lacks: at least two are of a wrong type.
ABSENT_VARIANTS = [("as string", g.Field(g.STRING, "x")), ("as u32 max", g.Field(g.U32, 2**32 - 1)),
                   ("as NaN", g.Field(g.F32, math.nan))]


def keys_read(path):
    result = subprocess.run([DSINFER, "info", "-m", path, "--keys-read"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """stories260K (llama, SPM vocabulary), a small qwen2 with a BPE vocabulary,
    a DeepSeek-V3-shaped deepseek2 with YaRN (reaches the MLA, MoE and
    rope-scaling keys), a DeepSeek-V3.2-shaped deepseek32 (the indexer's, and
    nextn_predict_layers: it carries the multi-token-prediction layer), and
    a DeepSeek-V4-shaped deepseek4 (hyper-connections, compression ratios,
    output groups, hash routing and the clamps)."""
    from make_deepseek2 import write_deepseek2
    from make_deepseek4 import write_deepseek4
    from make_model import write_model
    d = tmp_path_factory.mktemp("bases")
    qwen = write_model(str(d / "qwen2.gguf"), arch="qwen2", dtype="f32", n_embd=64, n_ff=128, n_head=4, n_head_kv=2, n_layer=1)
    v3 = write_deepseek2(str(d / "v3.gguf"), shape="v3", n_layer=2, yarn=(4.0, 512, 0.707))
    v32 = write_deepseek2(str(d / "v32.gguf"), shape="v3", layout="split", n_layer=2, yarn=(4.0, 512, 0.707), indexer=(16, 64, 8),
                          nextn=True)
    v4 = write_deepseek4(str(d / "v4.gguf"), ratios=[0, 4, 128])
    return {"stories": STORIES, "qwen2": qwen or str(d / "qwen2.gguf"), "v3": v3 or str(d / "v3.gguf"), "v32": v32, "v4": v4}


@pytest.mark.parametrize("base_name", ["stories", "qwen2", "v3", "v32", "v4"])
def test_every_key_the_loaders_read(bases, base_name, tmp_path):
    base_path = bases[base_name]
    untouched = []
    assert check(base_path, "-", False, "untouched", untouched) == 0 and not untouched, untouched
    base = g.read(base_path)
    keys = keys_read(base_path)
    assert len(keys) > 20
    # Each dsinfer run is one process on one core (and under ASan mostly its
    # start-up): the files are checked a core each at a time.
    problems = []
    runs = {}  # key -> the loaders' exit status of each of its crafted files, to come
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        for k, key in enumerate(keys):
            present = key in base.fields
            if present:
                cases = [(label, f, refuse) for label, f, refuse in variants(base.fields[key])]
                cases.append(("absent", None, False))
            else:
                cases = [(label, f, False) for label, f in ABSENT_VARIANTS]
            for i, (label, field, must_refuse) in enumerate(cases):
                path = str(tmp_path / f"crafted-{k}-{i}.gguf")
                runs.setdefault(key, []).append(pool.submit(check_crafted, base, key, field, path, must_refuse, label, problems))
    n_cases = sum(len(statuses) for statuses in runs.values())
    for key, statuses in runs.items():
        if sum(s.result() == 1 for s in statuses) < 2 and key not in base.fields:
            problems.append(f"{key}: values of the wrong type were accepted")
    print(f"{base_name}: {len(keys)} keys read, {n_cases} crafted files, {len(problems)} problems")
    assert not problems, "\n".join(problems)


def with_tensor_info(model, name, new_name=None, dims=None):
    """The model with tensor `name` renamed (to a name of the same length) or given other dimensions."""
    crafted = model.copy()
    for i, info in enumerate(crafted.tensor_infos):
        n = struct.unpack_from("<Q", info, 0)[0]
        if bytes(info[8:8 + n]).decode() != name:
            continue
        info = bytes(info)
        if new_name:
            assert len(new_name) == len(name)
            info = info[:8] + new_name.encode() + info[8 + n:]
        if dims:
            n_dims = struct.unpack_from("<I", info, 8 + n)[0]
            assert len(dims) == n_dims
            info = info[:12 + n] + b"".join(struct.pack("<Q", d) for d in dims) + info[12 + n + 8 * n_dims:]
        crafted.tensor_infos[i] = info
        return crafted
    raise AssertionError(f"no tensor {name}")


def test_multi_token_prediction_tensors_and_key(bases, tmp_path):
    """--speculative-mtp reads the NextN layer's tensors: one missing or of the wrong shape is refused naming
    it, as is the option on a file whose nextn_predict_layers is 0 (blk.2 is then a layer of the model);
    without the option the first two run, and the last is refused for its nextn tensors, which a model
    of three layers does not read."""
    base = g.read(bases["v32"])
    n_embd = base.fields["deepseek32.embedding_length"].value
    cases = {"missing": with_tensor_info(base, "blk.2.nextn.shared_head_norm.weight", new_name="blk.2.nextn.shared_head_nor_.weight"),
             "transposed": with_tensor_info(base, "blk.2.nextn.eh_proj.weight", dims=[n_embd, 2 * n_embd])}
    without = base.copy()
    without.fields["deepseek32.nextn_predict_layers"] = g.Field(g.U32, 0)
    cases["without"] = without
    expected = {"missing": "blk.2.nextn.shared_head_norm.weight", "transposed": "blk.2.nextn.eh_proj.weight",
                "without": "multi-token prediction: the model has no such layer"}
    for label, crafted in cases.items():
        path = str(tmp_path / f"mtp-{label}.gguf")
        g.write(crafted, path)
        rc, stderr, _ = measured("run", "-p", "Once upon a time", "-n", "2", "--temp", "0", "-t", "1", "--speculative-mtp", "2",
                                 "-m", path)
        assert rc == 1 and expected[label] in stderr, (label, rc, stderr[-500:])
        rc, stderr, _ = measured("run", "-p", "Once upon a time", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
        if label == "without":
            assert rc == 1 and "tensor 'blk.2.nextn." in stderr and "not one dsinfer reads" in stderr, (label, rc, stderr[-500:])
        else:
            assert rc == 0, (label, stderr[-500:])


def with_alias(model, name, alias):
    """The model with one more tensor, `alias`, over the data of tensor `name`."""
    crafted = model.copy()
    source = next(info for info in crafted.tensor_infos if bytes(info[8:8 + len(name)]) == name.encode())
    crafted.tensor_infos.append(struct.pack("<Q", len(alias)) + alias.encode() + bytes(source[8 + len(name):]))
    return crafted


def test_a_tensor_the_model_does_not_read_is_refused_by_name(bases, tmp_path):
    """A tensor no loader asks for means a computation dsinfer would not do (a Qwen3-style query norm in
    a Llama file here; Llama 3's rope_freqs was once such a tensor, and was ignored): the file is refused
    naming it, as llama.cpp refuses files with tensors it does not use. A combined kv_b beside the split
    k_b/v_b is not such a tensor: llama.cpp reads it optionally and computes with k_b/v_b, as dsinfer does."""
    path = g.write(with_alias(g.read(STORIES), "blk.0.attn_norm.weight", "blk.0.attn_q_norm.weight"), str(tmp_path / "extra.gguf"))
    rc, stderr, _ = measured("run", "-p", "Once upon a time", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
    assert rc == 1 and "tensor 'blk.0.attn_q_norm.weight'" in stderr and "not one dsinfer reads for llama" in stderr, stderr[-500:]
    path = g.write(with_alias(g.read(bases["v32"]), "blk.0.attn_k_b.weight", "blk.0.attn_kv_b.weight"), str(tmp_path / "kv_b.gguf"))
    rc, stderr, _ = measured("run", "-p", "Once upon a time", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
    assert rc == 0, stderr[-500:]


def test_huge_unread_arrays_cost_no_more_than_their_bytes(tmp_path):
    """Arrays no loader reads stay views into the file: a 40 MB u8 array, and
    4 million short strings."""
    base = g.read(STORIES)
    crafted = base.copy()
    crafted.fields["junk.bytes"] = g.Field(g.ARRAY, g.encoded_numbers("<B", 40 << 20), g.U8)
    crafted.fields["junk.strings"] = g.Field(g.ARRAY, g.encoded_strings([b"ab"] * (4 << 20)), g.STRING)
    path = g.write(crafted, str(tmp_path / "junk.gguf"))
    problems = []
    assert check(path, "junk.bytes", False, "40 MB + 4M strings", problems) == 0
    assert not problems, problems
