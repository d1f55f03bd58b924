"""llama.cpp's own convert_hf_to_gguf.py, from the llama-cpp-python 0.3.36
source package that scripts/install_deps.sh unpacks (its conversion/ and
gguf-py/ beside it), run as a user runs it."""

import json
import os
import subprocess
import sys

SOURCE = os.environ.get("DSINFER_LLAMA_CPP_SOURCE",
                        os.path.expanduser("~/.cache/dsinfer/llama-cpp-python-0.3.36/vendor/llama.cpp"))

# llama.cpp names a BPE pre-tokenizer by hashing a real model's tokens of a test
# text; GPT-2's vocabulary under Qwen2's rules (make_hf_checkpoint.py) is no
# real model, so its name is given: the rules' own, as dsinfer names them.
#
# Its DeepSeek-V3.2 class first asserts that transformers' tokenizer reports
# add_bos_token; transformers 5 loads DeepSeek's ByteLevel tokenizer.json as
# TokenizersBackend, which never does, whatever tokenizer_config.json says. The
# assertion is skipped; what it guards (the GGUF's add_bos_token) is written
# from tokenizer_config.json by both converters and compared.
#
# The script's main() runs once per conversion, as `python3 convert_hf_to_gguf.py`
# does, in one process: importing torch, transformers and the converter's
# classes takes most of a small conversion's time. A conversion that fails
# leaves its traceback in OUT.error and the next one runs.
RUN = """
import importlib.util, json, sys, traceback
import conversion.base, conversion.deepseek
conversion.deepseek.DeepseekV32Model.set_vocab = lambda self: self._set_vocab_gpt2()
hashed_pre = conversion.base.TextModel.get_vocab_base_pre
spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", {script!r})
converter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(converter)
for checkpoint, out, outtype, pre in json.loads(sys.argv[1]):
    conversion.base.TextModel.get_vocab_base_pre = (lambda self, tokenizer, pre=pre: pre) if pre else hashed_pre
    sys.argv = [{script!r}, checkpoint, "--outtype", outtype, "--outfile", out]
    try:
        converter.main()
    except BaseException:
        with open(out + ".error", "w") as f:
            f.write(traceback.format_exc())
"""


def available():
    return os.path.exists(os.path.join(SOURCE, "convert_hf_to_gguf.py"))


def convert_all(jobs):
    """Runs (checkpoint, out, outtype, pre_name) conversions in one process: for
    each output path, None where it was written, else the traceback that ended it and the log's end."""
    assert available(), f"llama.cpp's converter is not at {SOURCE}: run scripts/install_deps.sh"
    script = os.path.join(SOURCE, "convert_hf_to_gguf.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SOURCE, "gguf-py"), SOURCE]))
    jobs = [(str(checkpoint), str(out), outtype, pre) for checkpoint, out, outtype, pre in jobs]
    result = subprocess.run([sys.executable, "-c", RUN.format(script=script), json.dumps(jobs)], capture_output=True, text=True,
                            env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = {}
    for _, out, _, _ in jobs:
        error = out + ".error"
        errors[out] = open(error).read() + f"\nthe converter's log, last lines:\n{result.stderr[-2000:]}" if os.path.exists(error) else None
    return errors
