"""The jinja2 environment Hugging Face transformers renders chat templates with.

Mirrors transformers.utils.chat_template_utils._compile_jinja_template (v4.4x):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension and the AssistantTracker ({% generation %}) extension,
a tojson filter that is plain json.dumps (ensure_ascii=False), and the globals
raise_exception and strftime_now. transformers itself is not needed.
"""

import json
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    # {% generation %}...{% endgeneration %}: transformers uses it to build an
    # assistant-token mask; for rendering it is its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


class TemplateRaised(Exception):
    """raise_exception() was called: transformers raises TemplateError(message)."""


def make_env(now=None):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return (now or datetime.now()).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, variables, now=None):
    """Returns ("ok", text) or ("error", kind, message).

    kind: "raised" (raise_exception), "undefined" (UndefinedError),
    "syntax" (TemplateSyntaxError / TemplateAssertionError), "runtime" (others).
    """
    env = make_env(now)
    try:
        compiled = env.from_string(template)
    except (jinja2.exceptions.TemplateSyntaxError, jinja2.exceptions.TemplateAssertionError) as e:
        return ("error", "syntax", f"line {e.lineno}: {e.message}")
    except SyntaxError as e:  # e.g. {% break %} outside a loop fails in Python's compiler
        return ("error", "syntax", f"python: {e.msg}")
    try:
        return ("ok", compiled.render(**variables))
    except jinja2.exceptions.UndefinedError as e:
        return ("error", "undefined", str(e))
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises a bare TemplateError; other TemplateErrors
        # (TemplateRuntimeError, SecurityError) are subclasses.
        if type(e) is jinja2.exceptions.TemplateError:
            return ("error", "raised", str(e))
        return ("error", "runtime", f"{type(e).__name__}: {e}")
    except Exception as e:  # TypeError, ValueError, ZeroDivisionError, OverflowError...
        return ("error", "runtime", f"{type(e).__name__}: {e}")
