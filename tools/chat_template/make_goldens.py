#!/usr/bin/env python3
"""Generates the golden renderings the C++ chat-template tests compare against.

Run from anywhere; writes tests/tokenizer/data/chat/{engine,chat}_goldens.json
and random_conversations.json:
  python3 tools/chat_template/make_goldens.py [--fixtures DIR]

Renders with Python jinja2 configured exactly as Hugging Face transformers
does (hf_env.py), so the committed outputs are what transformers'
apply_chat_template produces. Requires jinja2 (tools/requirements-test.txt).
"""

import argparse
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.nodes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import engine_cases  # noqa: E402
import hf_env  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "tokenizer" / "data" / "chat"
# strftime_now() sees this instant in the goldens (the C++ tests fix the same).
FIXED_NOW = datetime.datetime(2024, 7, 26, 13, 5, 9)

# What Python prints for iterators and views (map/select results, dict.items()):
# vpod makes lists of them, so random cases that print one are left out.
UNPRINTABLE_MARKERS = ["<generator object", " at 0x", "iterator object", "dict_items(", "dict_keys(",
                       "dict_values(", "<built-in method", "<bound method", "<function "]

# The fixture tokenizers whose tokenizer_config.json templates are tested.
FIXTURE_MODELS = ["llama3", "qwen3", "mistral"]


def fnv1a64(data):
    """FNV-1a 64-bit hash, hex: lets the C++ test check it renders the same template text."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def special_tokens(config):
    """transformers' special_tokens_map: the special tokens that are set."""
    out = {}
    for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"]:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list) and extra:
        out["additional_special_tokens"] = [t["content"] if isinstance(t, dict) else t for t in extra]
    return out


def iterates_message_content(template):
    """vLLM's _detect_content_format: "openai" iff a loop runs over a message's content."""
    env = hf_env.make_env()
    ast = env.parse(template)

    def is_var(node, name):
        return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name

    def is_attr(node, name, key):
        if isinstance(node, jinja2.nodes.Getitem):
            return (is_var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const)
                    and node.arg.value == key)
        if isinstance(node, jinja2.nodes.Getattr):
            return is_var(node.node, name) and node.attr == key
        return False

    def access(node, name, key=None):
        if isinstance(node, jinja2.nodes.Filter):
            return node.node is not None and access(node.node, name, key)
        if isinstance(node, jinja2.nodes.Test):
            return access(node.node, name, key)
        if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
            return access(node.node, name, key)
        return is_attr(node, name, key) if key else is_var(node, name)

    messages_vars = ["messages"]
    pending = ["messages"]
    while pending:
        var = pending.pop(0)
        for assign in ast.find_all(jinja2.nodes.Assign):
            if isinstance(assign.target, jinja2.nodes.Name) and access(assign.node, var):
                messages_vars.append(assign.target.name)
                if assign.target.name != var:
                    pending.append(assign.target.name)
    message_vars = []
    for loop in ast.find_all(jinja2.nodes.For):
        if isinstance(loop.target, jinja2.nodes.Name) and any(access(loop.iter, v) for v in messages_vars):
            message_vars.append(loop.target.name)
    return any(access(loop.iter, v, "content") for loop in ast.find_all(jinja2.nodes.For)
               for v in message_vars)


def prepare_messages(messages, parts_as_list):
    """The documented vpod/vLLM rule: text parts are joined with "\\n" unless the
    template iterates over message content."""
    if parts_as_list:
        return messages
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        out.append(m)
    return out


def continue_final(rendered, messages):
    """transformers' continue_final_message handling."""
    final = messages[-1]["content"]
    if isinstance(final, list):
        texts = [p["text"] for p in final if "text" in p]
        if not texts:
            raise ValueError("continue_final_message: no text in the final message")
        final = texts[-1]
    if final.strip() not in rendered:
        raise ValueError("continue_final_message: final message not in the rendered chat")
    loc = rendered.rindex(final.strip())
    if rendered[loc:loc + len(final.lstrip())] == final:
        return rendered[:loc + len(final.lstrip())]
    return rendered[:loc + len(final.strip())]


def result_record(result):
    if result[0] == "ok":
        return {"expected": result[1]}
    return {"error": {"kind": result[1], "message": result[2]}}


def engine_goldens():
    """The cases, and variable sets shared by many cases (stored once)."""
    out = []
    shared = {}
    names = set()
    for name, template, variables in engine_cases.CASES:
        assert name not in names, name
        names.add(name)
        record = {"name": name, "template": template}
        if name.startswith(engine_cases.LOOSE_ERROR_PREFIX):
            shared["random_expr"] = variables
            record["variables_ref"] = "random_expr"
        else:
            record["variables"] = variables
        record.update(result_record(hf_env.render(template, variables, FIXED_NOW)))
        if name.startswith(engine_cases.LOOSE_ERROR_PREFIX):
            if "error" in record:
                record["error"]["loose"] = True
            elif any(m in record["expected"] for m in UNPRINTABLE_MARKERS):
                continue  # prints a Python iterator object: a documented difference
        out.append(record)
    return out, shared


def load_templates(fixtures):
    """Templates by name: the fixtures' tokenizer_config.json ones and ours."""
    templates = {}
    for model in FIXTURE_MODELS:
        path = fixtures / "tokenizers" / model / "tokenizer_config.json"
        if not path.exists():
            sys.exit(f"missing fixture {path}")
        config = json.loads(path.read_text())
        template = config.get("chat_template")
        if isinstance(template, list):
            template = next(t["template"] for t in template if t["name"] == "default")
        templates[f"fixture:{model}"] = {
            "source": f"fixtures/tokenizers/{model}/tokenizer_config.json",
            "template": template,
            "special_tokens": special_tokens(config),
        }
    for path in sorted((DATA / "templates").glob("*.jinja")):
        config_path = path.with_suffix(".tokens.json")
        tokens = json.loads(config_path.read_text()) if config_path.exists() else {}
        templates[f"repo:{path.stem}"] = {
            "source": f"tests/tokenizer/data/chat/templates/{path.name}",
            "template": path.read_text(),
            "special_tokens": tokens,
        }
    return templates


def random_conversations(seed=5, count=40):
    """Conversations with random roles, whitespace, unicode, reasoning blocks,
    text parts and tool calls, written to random_conversations.json."""
    import random

    rng = random.Random(seed)
    pieces = ["Hello", "world", " ", "  ", "\n", "\n\n", "\t", "é", "日本", "😀", "👩‍💻", "\u00a0", "\u3000",
              "\"quoted\"", "'single'", "\\", "{{ x }}", "{% if %}", "<|im_end|>", "<|eot_id|>", "</s>",
              "[INST]", "<tool_call>", "<think>", "</think>", "a" * 40, "1.5", "{\"k\": 1}"]

    def text(lo=0, hi=6):
        return "".join(rng.choice(pieces) for _ in range(rng.randint(lo, hi)))

    def content():
        r = rng.random()
        if r < 0.15:
            return [{"type": "text", "text": text(1)} for _ in range(rng.randint(1, 3))]
        if r < 0.3:
            return "<think>\n" + text(1) + "\n</think>\n\n" + text(1)
        return text()

    tools = [{"type": "function", "function": {"name": "lookup", "description": text(1, 3),
                                               "parameters": {"type": "object", "properties": {
                                                   "q": {"type": "string"}}, "required": ["q"]}}}]
    out = []
    for n in range(count):
        messages = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": content()})
        for turn in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": content()})
            if rng.random() < 0.2:
                messages.append({"role": "assistant", "content": text(),
                                 "tool_calls": [{"type": "function", "function": {
                                     "name": "lookup", "arguments": {"q": text(1, 3)}}}]})
                messages.append({"role": "tool", "content": text(1)})
            if turn < 3 and rng.random() < 0.8:
                messages.append({"role": "assistant", "content": content()})
        conv = {"name": f"random_{n:02d}", "messages": messages}
        if rng.random() < 0.3:
            conv["tools"] = tools
        out.append(conv)
    return out


def chat_goldens(fixtures):
    conversations = json.loads((DATA / "conversations.json").read_text())
    randoms = random_conversations()
    (DATA / "random_conversations.json").write_text(json.dumps(randoms, indent=1, ensure_ascii=False) + "\n")
    conversations += randoms
    templates = load_templates(fixtures)
    out = {"templates": {}, "cases": []}
    for tname, t in templates.items():
        template = t["template"]
        info = {"source": t["source"], "special_tokens": t["special_tokens"]}
        if template is None:
            info["has_template"] = False
            out["templates"][tname] = info
            continue
        info["has_template"] = True
        info["fnv1a64"] = fnv1a64(template.encode())
        parts_as_list = iterates_message_content(template)
        info["iterates_message_content"] = parts_as_list
        out["templates"][tname] = info
        for conv in conversations:
            for agp in conv.get("add_generation_prompt", [False, True]):
                extra = conv.get("extra", {})
                variables = {
                    "messages": prepare_messages(conv["messages"], parts_as_list),
                    "tools": conv.get("tools"),
                    "documents": None,
                    "add_generation_prompt": agp,
                    **t["special_tokens"],
                    **extra,
                }
                result = hf_env.render(template, variables, FIXED_NOW)
                cfm = conv.get("continue_final_message", False)
                if cfm and result[0] == "ok":
                    try:
                        result = ("ok", continue_final(result[1], variables["messages"]))
                    except ValueError as e:
                        result = ("error", "continue_final_message", str(e))
                record = {
                    "template": tname,
                    "conversation": conv["name"],
                    "add_generation_prompt": agp,
                }
                if cfm:
                    record["continue_final_message"] = True
                record.update(result_record(result))
                out["cases"].append(record)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=pathlib.Path, default=REPO.parent / "shared" / "fixtures")
    args = parser.parse_args()
    header = ("Generated by tools/chat_template/make_goldens.py with jinja2 "
              f"{jinja2.__version__}; do not edit.")
    cases, shared = engine_goldens()
    engine = {"generated_by": header, "now": FIXED_NOW.isoformat(), "shared_variables": shared,
              "cases": cases}
    (DATA / "engine_goldens.json").write_text(json.dumps(engine, indent=1, ensure_ascii=False) + "\n")
    chat = {"generated_by": header, "now": FIXED_NOW.isoformat(), **chat_goldens(args.fixtures)}
    (DATA / "chat_goldens.json").write_text(json.dumps(chat, indent=1, ensure_ascii=False) + "\n")
    n_err = sum(1 for c in engine["cases"] if "error" in c)
    print(f"engine cases: {len(engine['cases'])} ({n_err} errors); chat cases: {len(chat['cases'])}")


if __name__ == "__main__":
    main()
