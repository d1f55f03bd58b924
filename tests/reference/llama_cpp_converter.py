"""llama.cpp's own convert_hf_to_gguf.py, from the llama-cpp-python 0.3.36
source package that scripts/install_deps.sh unpacks (its conversion/ and
gguf-py/ beside it), run as a user runs it."""

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
RUN = """
import runpy, sys
pre = sys.argv.pop(1)
if pre:
    import conversion.base
    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
import conversion.deepseek
conversion.deepseek.DeepseekV32Model.set_vocab = lambda self: self._set_vocab_gpt2()
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def available():
    return os.path.exists(os.path.join(SOURCE, "convert_hf_to_gguf.py"))


def convert(checkpoint, out, outtype, pre_name=""):
    assert available(), f"llama.cpp's converter is not at {SOURCE}: run scripts/install_deps.sh"
    script = os.path.join(SOURCE, "convert_hf_to_gguf.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SOURCE, "gguf-py"), SOURCE]))
    result = subprocess.run([sys.executable, "-c", RUN.format(script=script), pre_name, str(checkpoint), "--outtype", outtype,
                             "--outfile", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out
