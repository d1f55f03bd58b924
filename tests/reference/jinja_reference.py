"""The reference for dsinfer's Jinja interpreter: Python jinja2 set up as
transformers' apply_chat_template sets it up (utils/chat_template_utils.py,
_compile_jinja_template): an immutable sandbox, trim_blocks and lstrip_blocks,
the loop controls extension, tojson as json.dumps without ASCII escaping, and
the raise_exception / strftime_now globals."""

import functools
import json
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=64)
def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def render(source, context):
    """The text transformers would produce, or ("error", message)."""
    try:
        return compile_template(source).render(**context)
    except Exception as error:  # a template's own raise_exception, a type error, a syntax error
        return ("error", f"{type(error).__name__}: {error}")
