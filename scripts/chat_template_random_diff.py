#!/usr/bin/env python3
"""chat_template_random_diff.py — compares kiln's chat-template engine with transformers' renderer on
random templates: expressions (literals, operators, filters, tests, methods, conditionals, slices)
and, with --statements, blocks of if / for (else, break, continue, loop.*) / set / block set / macro
and whitespace control around them. It renders each with transformers, writes them as the snippets
of an expected.json in a temporary repository root, and runs test_chat_template on that root, which
reports every difference. A development aid, not a CI test (needs transformers and jinja2):
    .venv/bin/python scripts/chat_template_random_diff.py [--statements] BINARY [SEED] [COUNT]"""

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


NAMES = ["x", "y", "ns.a", "ns.b"]
SIMPLE = ["x", "y", "ns.a", "ns.b", "loop.index", "loop.first", "m.role", "m['content']", "i", "1", "'s'",
          "messages|length", "unset_v"]
ITERABLES = ["messages", "range(3)", "[1,2]", "messages|selectattr('role','equalto','user')", "'ab'"]


def statement(rng, depth):
    k, s = rng.random(), lambda: rng.choice(SIMPLE)
    if depth > 3 or k < 0.25:
        return "{{ " + rng.choice([s(), expression(rng, 2)]) + " }}"
    if k < 0.35:
        value = rng.choice([s() + " ~ 'z'", "1 + 1", "'v'", "[1,2]"])
        return "{% set " + rng.choice(NAMES) + " = " + value + " %}"
    if k < 0.5:
        a, b, c = (statements(rng, depth + 1) for _ in range(3))
        return f"{{% if {s()} %}}{a}{{% elif {s()} %}}{b}{{% else %}}{c}{{% endif %}}"
    if k < 0.65:
        target = rng.choice(["m", "i", "x"])
        return f"{{% for {target} in {rng.choice(ITERABLES)} %}}{statements(rng, depth + 1)}{{% else %}}E{{% endfor %}}"
    if k < 0.72:
        body, call = statements(rng, depth + 1), rng.choice(["1", "x", "b=3, a=4"])
        return f"{{% macro mm(a, b=2) %}}[{{{{ a }}}}{{{{ b }}}}{body}]{{% endmacro %}}{{{{ mm({call}) }}}}"
    if k < 0.78:
        return f"{{% if {s()} %}}{{% {rng.choice(['break', 'continue'])} %}}{{% endif %}}"
    if k < 0.84:
        return "{% set y %}" + statements(rng, depth + 1) + "{% endset %}"
    if k < 0.9:
        return "\n  " + statement(rng, depth + 1) + "\n"
    if k < 0.95:
        return f"{{%- if {s()} -%}}\n  {statements(rng, depth + 1)}\n{{%- endif %}}"
    return "{# c #}"


def statements(rng, depth):
    return "".join(statement(rng, depth) for _ in range(rng.randint(1, 3)))


def main():
    args = [a for a in sys.argv[1:] if a != "--statements"]
    if not args:
        sys.exit(__doc__)
    binary, seed = args[0], int(args[1]) if len(args) > 1 else 1
    count = int(args[2]) if len(args) > 2 else 2000
    rng = random.Random(seed)
    snippets = []
    for _ in range(count):
        if "--statements" in sys.argv:
            source = "{% set ns = namespace(a=0, b='') %}{% set x = 'X' %}" + statements(rng, 0)
        else:
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
