"""`dsinfer convert` against llama.cpp's own convert_hf_to_gguf.py on the same
Hugging Face checkpoints (make_hf_checkpoint.py: Llama, Qwen2, DeepSeek-V3 and V3.2 shapes,
random bf16 weights in shards, an FP8 block-scaled variant, V3.2 with a multi-token-prediction
layer, which its GGUF keeps; DeepSeek-V4 as DeepSeek
publishes it, FP8 with e8m0 scales, FP4 experts, F32 and BF16): the GGUF files
equal key by key and tensor by tensor (bytes), for F32, F16, BF16 and Q8_0;
llama.cpp loads ours, and its logits agree with dsinfer's. Bad checkpoints
are refused naming the file and tensor, and a multi-shard conversion's peak
memory stays within the largest input and output tensors over its baseline.

general.name and general.version are the keys not compared: llama.cpp guesses
them from the directory's name and a model card; dsinfer writes the directory's
name as general.name. DeepSeek-V3's and V4's multi-token-prediction layers are
left out by both (deepseek2 and deepseek4 files have no place for them); V3.2's
are kept as the blocks after the others (make_hf_checkpoint.add_mtp_layer writes
one as DeepSeek publishes them: transformers writes none)."""

import json
import os
import subprocess

import numpy as np
import pytest

import llama_cpp_converter
from test_logits_vs_llama_cpp import QUANT_TOLERANCE, TOLERANCE, compare
from make_hf_checkpoint import add_mtp_layer, make_fp8, write_checkpoint, write_deepseek4_checkpoint
from fast_gguf_reader import FastGGUFReader

# Keys llama.cpp guesses from the directory's name and a model card (dsinfer writes the directory's name as general.name).
GUESSED = {"general.name", "general.version", "general.basename", "general.finetune"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    made = {family: write_checkpoint(str(root / family), family, layers=3 if family == "deepseek-v3" else 2)
            for family in ("llama", "qwen2", "deepseek-v3")}
    made.update({f"{family}-fp8": make_fp8(made[family], str(root / f"{family}-fp8")) for family in ("llama", "qwen2", "deepseek-v3")})
    # Llama 3's RoPE scaling (R1-Distill-Llama's: a rope_freqs tensor) over an original context of 16, and linear.
    made["llama-llama3"] = write_checkpoint(str(root / "llama-llama3"), "llama", rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    made["qwen2-linear"] = write_checkpoint(str(root / "qwen2-linear"), "qwen2", rope_scaling={"rope_type": "linear", "factor": 4.0})
    made["deepseek-v32"] = add_mtp_layer(write_checkpoint(str(root / "deepseek-v32"), "deepseek-v32", layers=3))
    made["deepseek-v4"] = write_deepseek4_checkpoint(str(root / "deepseek-v4"))
    return made


def fields(path):
    reader = FastGGUFReader(path)
    keys = {k: (f.types, f.contents()) for k, f in reader.fields.items() if not k.startswith("GGUF.") and k not in GUESSED}
    tensors = {t.name: (t.tensor_type, [int(n) for n in t.shape], np.asarray(t.data).view(np.uint8).tobytes()) for t in reader.tensors}
    return keys, tensors


CASES = [("llama", "q8_0"), ("llama", "f16"), ("llama", "bf16"), ("qwen2", "q8_0"), ("qwen2", "f32"), ("llama-fp8", "f32"),
         ("qwen2-fp8", "bf16"), ("deepseek-v3", "q8_0"), ("deepseek-v3", "bf16"), ("deepseek-v3-fp8", "f32"), ("deepseek-v32", "q8_0"),
         ("deepseek-v32", "f32"), ("deepseek-v4", "f16"), ("llama-llama3", "f32"), ("qwen2-linear", "f16")]


def pre_name(source):
    """The pre-tokenizer's name llama.cpp is given ("": its own hash of the vocabulary names it). GPT-2's vocabulary
    under another family's rules: llama.cpp's hash of it names no real model, so the rules' name is given (V3.2's
    and V4's are V3's)."""
    family = source.removesuffix("-fp8")
    return {"llama": "", "llama-llama3": "", "qwen2-linear": "qwen2", "deepseek-v32": "deepseek-v3", "deepseek-v4": "deepseek-v3"}.get(family, family)


@pytest.fixture(scope="module")
def theirs(checkpoints, tmp_path_factory):
    """llama.cpp's conversion of every case, in one process (llama_cpp_converter.convert_all): (source, outtype) -> (path, error)."""
    root = tmp_path_factory.mktemp("theirs")
    paths = {case: str(root / f"{case[0]}-{case[1]}.gguf") for case in CASES}
    errors = llama_cpp_converter.convert_all([(checkpoints[source], paths[(source, outtype)], outtype, pre_name(source))
                                              for source, outtype in CASES])
    return {case: (path, errors[path]) for case, path in paths.items()}


@pytest.mark.parametrize("source,outtype", CASES)
def test_the_gguf_equals_llama_cpps_key_by_key_and_tensor_by_tensor(dsinfer, checkpoints, theirs, tmp_path, source, outtype):
    family = source.removesuffix("-fp8")
    their_file, error = theirs[(source, outtype)]
    assert error is None, f"llama.cpp's converter failed on {source} {outtype}:\n{error}"
    ours = tmp_path / "ours.gguf"
    dsinfer("convert", checkpoints[source], "-o", ours, "--type", outtype)
    their_keys, their_tensors = fields(their_file)
    our_keys, our_tensors = fields(str(ours))
    assert our_keys.keys() == their_keys.keys()
    for key in their_keys:
        assert our_keys[key] == their_keys[key], key
    assert our_tensors.keys() == their_tensors.keys()
    for name in their_tensors:
        assert our_tensors[name][:2] == their_tensors[name][:2], name
        assert our_tensors[name][2] == their_tensors[name][2], f"{name}: bytes differ"

    # llama.cpp loads ours (the same bytes as its own): its logits and dsinfer's agree within the
    # bound the logit comparisons hold each type to (test_logits_vs_llama_cpp.py). V4's file is
    # Q8_0, MXFP4 and BF16 whatever --type says: the quantized formats' bound, as its MXFP4 file there.
    tolerance = QUANT_TOLERANCE if family == "deepseek-v4" else TOLERANCE.get(outtype, QUANT_TOLERANCE)
    error = compare(dsinfer, ours, tmp_path / "logits.npy", tolerance=tolerance)
    print(f"\n{source} {outtype}: identical files; llama.cpp loads ours, relative max logit error {error:.2e} (tolerance {tolerance:g})")
    assert error <= tolerance


def refused(dsinfer, checkpoint, tmp_path):
    result = dsinfer("convert", checkpoint, "-o", tmp_path / "bad.gguf", "--type", "f16", check=False)
    assert result.returncode != 0 and not os.path.exists(tmp_path / "bad.gguf")
    return result.stderr.decode()


def copy(source, tmp_path, name):
    out = tmp_path / name
    subprocess.run(["cp", "-r", source, str(out)], check=True)
    return out


def rewrite_tensor(checkpoint, name, value=None):
    """Replaces a tensor in its shard, or with value None drops it (and its index entry)."""
    from safetensors.torch import load_file, save_file
    index = json.load(open(checkpoint / "model.safetensors.index.json"))
    shard = index["weight_map"][name]
    tensors = load_file(str(checkpoint / shard))
    if value is None:
        del index["weight_map"][name], tensors[name]
    else:
        tensors[name] = value
    json.dump(index, open(checkpoint / "model.safetensors.index.json", "w"))
    save_file(tensors, str(checkpoint / shard), metadata={"format": "pt"})
    return tensors


def test_bad_checkpoints_are_refused_naming_the_file_and_tensor(dsinfer, checkpoints, tmp_path):
    missing = copy(checkpoints["llama"], tmp_path, "missing")
    os.remove(missing / "model-00002-of-00003.safetensors")
    assert "missing shard" in (e := refused(dsinfer, missing, tmp_path)) and "model-00002-of-00003.safetensors" in e, e

    truncated = copy(checkpoints["llama"], tmp_path, "truncated")
    with open(truncated / "model-00001-of-00003.safetensors", "r+b") as f:
        f.truncate(100)  # inside its JSON header
    assert "model-00001-of-00003.safetensors" in (e := refused(dsinfer, truncated, tmp_path)) and "truncated" in e, e

    shape = copy(checkpoints["llama"], tmp_path, "shape")
    config = json.load(open(shape / "config.json"))
    config["intermediate_size"] = 96
    json.dump(config, open(shape / "config.json", "w"))
    assert "'model.layers.0.mlp.gate_proj.weight'" in (e := refused(dsinfer, shape, tmp_path)) and "config.json implies" in e, e

    unscaled = copy(checkpoints["llama-fp8"], tmp_path, "unscaled")
    index = json.load(open(unscaled / "model.safetensors.index.json"))
    dropped = next(n for n in index["weight_map"] if n.endswith("q_proj.weight_scale_inv"))
    rewrite_tensor(unscaled, dropped)
    assert dropped in (e := refused(dsinfer, unscaled, tmp_path)) and "FP8" in e, e

    expertless = copy(checkpoints["deepseek-v3"], tmp_path, "expertless")
    rewrite_tensor(expertless, "model.layers.1.mlp.experts.3.up_proj.weight")
    assert "layer 1 has no expert 3 up_proj" in (e := refused(dsinfer, expertless, tmp_path)), e

    unexplained = copy(checkpoints["deepseek-v32"], tmp_path, "unexplained")  # an MTP layer config.json does not announce
    config = json.load(open(unexplained / "config.json"))
    config["num_nextn_predict_layers"] = 0
    json.dump(config, open(unexplained / "config.json", "w"))
    assert "'model.layers.3." in (e := refused(dsinfer, unexplained, tmp_path)) and "num_nextn_predict_layers 0" in e, e

    unknown = copy(checkpoints["llama"], tmp_path, "unknown")
    config = json.load(open(unknown / "config.json"))
    config["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "original_max_position_embeddings": 64}
    config["attn_logit_softcapping"] = 30.0
    json.dump(config, open(unknown / "config.json", "w"))
    assert "attn_logit_softcapping" in (e := refused(dsinfer, unknown, tmp_path)), e


def test_bad_deepseek4_checkpoints_are_refused_naming_the_tensor(dsinfer, checkpoints, tmp_path):
    """V4's own failure modes: an FP4 expert without its e8m0 scales (it would read as bytes of integers),
    an FP8 weight without its .scale, a token-to-expert table naming an expert that is not there, and a
    hash-routed layer without its table."""
    unscaled_expert = copy(checkpoints["deepseek-v4"], tmp_path, "unscaled-expert")
    rewrite_tensor(unscaled_expert, "layers.1.ffn.experts.2.w3.scale")
    assert "'layers.1.ffn.experts.2.w3.weight'" in (e := refused(dsinfer, unscaled_expert, tmp_path)) and "FP4" in e, e

    unscaled = copy(checkpoints["deepseek-v4"], tmp_path, "unscaled")
    rewrite_tensor(unscaled, "layers.2.attn.wq_b.scale")
    assert "'layers.2.attn.wq_b.weight'" in (e := refused(dsinfer, unscaled, tmp_path)) and "layers.2.attn.wq_b.scale" in e, e

    bad_table = copy(checkpoints["deepseek-v4"], tmp_path, "bad-table")
    table = json.load(open(bad_table / "model.safetensors.index.json"))["weight_map"]["layers.0.ffn.gate.tid2eid"]
    from safetensors.torch import load_file
    ids = load_file(str(bad_table / table))["layers.0.ffn.gate.tid2eid"].clone()
    ids[1234, 1] = 4  # of experts 0..3
    rewrite_tensor(bad_table, "layers.0.ffn.gate.tid2eid", ids)
    assert "token 1234 goes to expert 4 of 4" in (e := refused(dsinfer, bad_table, tmp_path)), e

    tableless = copy(checkpoints["deepseek-v4"], tmp_path, "tableless")
    rewrite_tensor(tableless, "layers.0.ffn.gate.tid2eid")
    assert "'layers.0.ffn.gate.tid2eid'" in (e := refused(dsinfer, tableless, tmp_path)) and "hash-routed" in e, e


def peak_rss_of(command):
    """The peak resident memory (bytes) of a command, measured by GNU time: a
    child of this process would carry the test's own (torch's) peak across its exec."""
    result = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return int(result.stderr.strip().splitlines()[-1]) * 1024


def test_peak_memory_of_a_multi_shard_conversion(checkpoints, tmp_path):
    """hidden 1024: token_embd and output are 50257 x 1024 bf16, 103 MB each, the
    largest tensors, in shards of 32 MB or less (a tensor larger than a shard gets its own).
    Converted to BF16, a tensor's input and output are the same size. Over the
    baseline (the same conversion of the hidden-64 model: binary, tokenizer,
    metadata), the converter holds one output tensor whole (the writer takes it
    whole) and the input's mapped pages only until their rows are done (released
    every 4 MiB), plus a row: the largest tensor and 16 MiB of slack for that
    stride, the allocator and the page granularity. Twice the largest tensor is the bound asked for."""
    from conftest import ROOT
    binary = os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer"))
    big = write_checkpoint(str(tmp_path / "big"), "llama", hidden=1024, layers=2, shard="32MB")
    shards = [n for n in os.listdir(big) if n.endswith(".safetensors")]
    largest = 50257 * 1024 * 2
    baseline = peak_rss_of([binary, "convert", checkpoints["llama"], "-o", str(tmp_path / "small.gguf"), "--type", "bf16"])
    peak = peak_rss_of([binary, "convert", big, "-o", str(tmp_path / "big.gguf"), "--type", "bf16"])
    total = sum(os.path.getsize(os.path.join(big, n)) for n in shards)
    print(f"\nconvert, {len(shards)} shards of {total / 2**20:.0f} MiB, largest tensor {largest / 2**20:.0f} MiB: peak RSS "
          f"{peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB: {(peak - baseline) / largest:.2f}x the largest tensor")
    assert len(shards) > 2
    assert peak - baseline <= 2 * largest
    assert peak - baseline <= largest + (16 << 20)


def test_a_checkpoint_on_the_hub_is_pulled_and_converted(dsinfer, checkpoints, tmp_path):
    """`dsinfer convert hf://OWNER/NAME`: the checkpoint's files (config, shards and index, tokenizer) pulled
    into the hub cache, other formats' copies of the weights left on the hub, and the GGUF equal to converting
    the same files from a local directory."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    from mock_hub import MockHub, Repo
    source = checkpoints["qwen2"]
    files = {n: open(os.path.join(source, n), "rb").read() for n in os.listdir(source)}
    files["pytorch_model.bin"] = b"another format's copy of the weights"
    hub = MockHub()
    try:
        hub.add("tester/tiny-qwen2", Repo(files, lfs={n for n in files if n.endswith(".safetensors")}))
        from_hub = tmp_path / "hub.gguf"
        env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "cache"))
        result = subprocess.run([os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer")), "convert", "hf://tester/tiny-qwen2",
                                 "-o", str(from_hub), "--type", "q8_0"], capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr
        fetched = {e["path"].rsplit("/", 1)[-1] for e in hub.gets()}
    finally:
        hub.stop()
    assert "pytorch_model.bin" not in fetched and "config.json" in fetched
    local = tmp_path / "local.gguf"
    dsinfer("convert", source, "-o", local, "--type", "q8_0")
    ours, theirs = fields(str(from_hub)), fields(str(local))
    assert ours == theirs
    assert FastGGUFReader(str(from_hub)).fields["general.name"].contents() == "tiny-qwen2"
