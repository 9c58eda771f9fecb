#!/usr/bin/env python3
"""chat_template_random_diff.py — compares kiln's chat-template engine with transformers' renderer on
random expressions (literals, operators, filters, tests, methods, conditionals, slices): it renders
each `{{ expression }}` with transformers, writes them as the snippets of an expected.json in a
temporary repository root, and runs test_chat_template on that root, which reports every
difference. A development aid, not a CI test (needs transformers and jinja2):
    .venv/bin/python scripts/chat_template_random_diff.py build/tests/test_chat_template [SEED] [COUNT]"""

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fixtures", os.path.join(HERE, "gen_chat_template_fixtures.py"))
fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixtures)

STRINGS = ["'a'", "'Hello World'", "'  pad '", "'é'", "'x,y,,z'", "''", "'3'", "'4.5'", "'<b>&\"'", "'\\n'",
           "'AbC'", "'ünï'"]
SCALARS = ["0", "1", "-2", "3.5", "1e3", "0.1", "true", "false", "none", "2**3"] + STRINGS
FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "string", "int", "float", "list", "first",
           "last", "tojson", "join(',')", "default('D')", "default('D', true)", "reverse|list", "sort|list",
           "unique|list", "sum", "abs", "items|list", "map('string')|list", "select|list", "reject|list",
           "replace('a','b')", "indent(2)", "round", "max", "min", "dictsort", "tojson(indent=1)", "count", "safe"]
TESTS = ["defined", "none", "string", "number", "mapping", "iterable", "sequence", "odd", "even", "true", "false",
         "integer", "float", "lower", "upper", "equalto 1", "in [1, 'a']"]
METHODS = [".strip()", ".upper()", ".lower()", ".split()", ".split(',')", ".startswith('a')", ".endswith('z')",
           ".title()", ".replace('l','L')", ".find('l')", ".count('a')", ".get('role')", ".items()|list",
           ".keys()|list", ".values()|list"]
OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]


def literal(rng, depth):
    k = rng.random()
    if depth > 2 or k < 0.55:
        return rng.choice(SCALARS)
    if k < 0.7:
        return "[" + ", ".join(expression(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    if k < 0.8:
        items = (f"{rng.choice(STRINGS)}: {expression(rng, depth + 1)}" for _ in range(rng.randint(0, 2)))
        return "{" + ", ".join(items) + "}"
    if k < 0.9:
        return f"messages[{rng.randint(-2, 2)}]"
    return rng.choice(["messages", "messages[0].content", "messages[1]['role']", "undefined_v", "bos_token"])


def expression(rng, depth=0):
    k = rng.random()
    if depth > 3 or k < 0.3:
        return literal(rng, depth)
    if k < 0.5:
        return f"({expression(rng, depth + 1)} {rng.choice(OPS)} {expression(rng, depth + 1)})"
    if k < 0.65:
        return f"({expression(rng, depth + 1)}|{rng.choice(FILTERS)})"
    if k < 0.75:
        return f"({expression(rng, depth + 1)} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if k < 0.83:
        return literal(rng, depth + 1) + rng.choice(METHODS)
    if k < 0.9:
        a, b, c = (expression(rng, depth + 1) for _ in range(3))
        return f"({a} if {b} else {c})"
    if k < 0.95:
        return f"(not {expression(rng, depth + 1)})"
    return f"{literal(rng, depth + 1)}[{rng.choice(['', '1', '-1'])}:{rng.choice(['', '2', '-1'])}]"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    rng = random.Random(seed)
    snippets = []
    for _ in range(count):
        source = "{{ " + expression(rng) + " }}"
        case = {"template": source}
        try:
            case.update(fixtures.render(source, "<s>", "</s>", fixtures.SNIPPET_MESSAGES, True))
        except Exception as e:  # Python errors the renderer does not turn into template errors
            case.update({"error": str(e), "kind": "runtime"})
        snippets.append(case)
    root = tempfile.mkdtemp(prefix="kiln-chat-diff-")
    try:
        data = os.path.join(root, "tests", "data", "chat_templates")
        os.makedirs(data)
        shutil.copy(os.path.join(fixtures.DATA, "llama-3.1-instruct.jinja"), data)  # the threads check reads it
        doc = {"templates": {}, "conversations": {}, "cases": [], "snippet_messages": fixtures.SNIPPET_MESSAGES,
               "snippets": snippets}
        with open(os.path.join(data, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        sys.exit(subprocess.run([binary, root]).returncode)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
