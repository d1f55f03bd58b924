"""The command line as a new user meets it: `dsinfer --version`, and for every
command `dsinfer COMMAND --help` (stdout, exit 0) checked against the parser
that reads the same table: every option it lists is one the parser knows, a
flag exactly where the help shows no value, and every line says what the
option does. A mistyped option names the closest known one."""

import re
import subprocess

from server_process import DSINFER, ROOT

OPTION_LINE = re.compile(r"^  (-[^\s,]+(?:, -[^\s,]+)*)(?: (\S+))?(?:\s{2,}(.*))?$")


def dsinfer(*args):
    return subprocess.run([DSINFER, *args], capture_output=True, text=True, timeout=60)


def commands():
    listing = dsinfer("--help")
    assert listing.returncode == 0 and listing.stderr == ""
    names = re.findall(r"^  (\w+)\s{2,}\S", listing.stdout.split("commands:")[1], re.M)
    assert {"run", "serve", "bench", "eval", "logits", "quantize", "info", "tokenize", "template", "router", "canary"} <= set(names)
    return names


def listed_options(command):
    """(names, value, meaning) for each option `dsinfer COMMAND --help` lists."""
    result = dsinfer(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(f"usage: dsinfer {command}")
    lines = result.stdout.split("\noptions:\n")[1].splitlines()
    options = []
    for i, line in enumerate(lines):
        if not line.startswith("  -"):
            continue
        match = OPTION_LINE.match(line)
        assert match, line
        names, value, meaning = match.group(1).split(", "), match.group(2), match.group(3)
        if meaning is None:  # a long left column puts the meaning on the next line
            meaning = lines[i + 1].strip()
        options.append((names, value, meaning))
    assert options[-1] == (["-h", "--help"], None, "this list, then exit")
    return options[:-1]


def test_version():
    result = dsinfer("--version")
    assert result.returncode == 0 and result.stderr == ""
    out = result.stdout
    assert re.match(r"dsinfer \d+\.\d+\.\d+\n", out)
    commit = re.search(r"^commit: (\S+)", out, re.M).group(1)
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode == 0:
        # Built from this checkout: a commit of its history (HEAD's, unless commits came after the build).
        ancestor = subprocess.run(["git", "-C", ROOT, "merge-base", "--is-ancestor", commit.removesuffix("-dirty"), "HEAD"])
        assert ancestor.returncode == 0, commit
    assert re.search(r"^build: (Release|Debug|RelWithDebInfo|MinSizeRel), ", out, re.M)
    assert re.search(r"^backends: cpu, cuda ", out, re.M)
    assert re.search(r"^tensor parallel: ", out, re.M)
    assert re.search(r"^kernels: (amx|avx512|avx2|portable) ", out, re.M)
    assert dsinfer("version").stdout == out


def test_help_matches_the_parser():
    for command in commands():
        options = listed_options(command)
        assert options, command
        seen = set()
        for names, value, meaning in options:
            assert meaning and len(meaning) >= 10, (command, names)
            for name in names:
                assert name not in seen, (command, name)
                seen.add(name)
                if value:  # known, and takes a value: without one it is refused for that
                    result = dsinfer(command, name)
                    assert f"option {name} needs a value ({value})" in result.stderr, (command, name, result.stderr)
                else:  # known, and a flag: with a value it is refused for that
                    result = dsinfer(command, name + "=1")
                    assert f"option {name} is a flag" in result.stderr, (command, name, result.stderr)
                assert result.returncode != 0
        assert "--help" in dsinfer(command, "-h").stdout


def test_defaults_are_shown():
    serve = {tuple(n): m for n, _, m in listed_options("serve")}
    assert serve[("--port",)].endswith("(default: 8000)")
    assert serve[("--max-num-seqs",)].endswith("(default: 16)")
    run = {tuple(n): m for n, _, m in listed_options("run")}
    assert run[("--temp",)].endswith("(default: 0.8)")
    assert run[("-n", "--n-predict")].endswith("(default: 128)")


def test_unknown_option_names_the_closest():
    for command, typo, meant in [("serve", "--prot", "--port"), ("run", "--temperature", "--temp"), ("run", "--top_k", "--top-k"),
                                 ("bench", "--concurency", "--concurrency"), ("serve", "--hepl", "--help")]:
        result = dsinfer(command, typo)
        assert result.returncode == 1
        assert f"unknown option {typo} (did you mean {meant}?)" in result.stderr, result.stderr
    far = dsinfer("serve", "--zzzzzzzzzz")
    assert "unknown option --zzzzzzzzzz: --help lists them" in far.stderr


def test_option_equals_value():
    result = dsinfer("serve", "--port=notanumber", "-m", "/nonexistent.gguf")
    assert "option --port expects an integer, got 'notanumber'" in result.stderr


def test_tensor_parallel_needs_one_device_per_rank():
    for command, extra in [("run", ["-p", "hi"]), ("bench", []), ("logits", ["--tokens", "1,2"]), ("serve", [])]:
        for devices, message in [("cpu:0", "--tensor-parallel 2 needs one device per rank; --device names 1"),
                                 ("cpu:0,cpu:0,cpu:0", "--device names 3")]:
            result = dsinfer(command, "-m", "/nonexistent.gguf", *extra, "--tensor-parallel", "2", "--device", devices)
            assert result.returncode == 1
            assert message in result.stderr, (command, devices, result.stderr)
    one = dsinfer("run", "-m", "/nonexistent.gguf", "-p", "hi", "--device", "cpu:0,cpu:1")
    assert "--device names 2 devices for 1 process: give one per rank of --tensor-parallel" in one.stderr, one.stderr


def test_the_multi_token_prediction_layer_in_ranks_is_refused_by_name():
    mtp = dsinfer("logits", "-m", "/nonexistent.gguf", "--tokens", "1,2", "--tensor-parallel", "2", "--mtp-out", "/tmp/x.npy")
    assert mtp.returncode == 1 and "--mtp-out with --tensor-parallel is not implemented" in mtp.stderr, mtp.stderr
