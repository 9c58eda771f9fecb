#!/usr/bin/env python3
"""gen_chat_template_fixtures.py — writes tests/data/chat_templates/expected.json: every chat template
of tests/data/chat_templates/*.jinja rendered by transformers' own chat-template renderer (the Jinja
environment apply_chat_template uses) over a fixed set of conversations (plain ones, and ones with
tool definitions and tool calls), with and without the generation prompt, and every one-line template of snippets.txt (one construct or whitespace rule
each) over a short conversation. tests/unit/test_chat_template.c checks kiln's renderer against it
byte for byte.

Run once after adding a template or a conversation (needs transformers and jinja2):
    .venv/bin/python scripts/gen_chat_template_fixtures.py
strftime_now sees a fixed clock (FIXED_NOW), as the C test sets it, so that the output is stable. A
template that raises is recorded with the message (kind "raise" for raise_exception, "syntax" for a
template Jinja refuses to compile, "runtime" for any other template error)."""

import datetime as dt
import json
import os
import sys

import jinja2
from transformers.utils import chat_template_utils

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "chat_templates")
FIXED_NOW = dt.datetime(2025, 3, 4, 15, 6, 7)

# name -> (bos_token, eos_token, where the template text comes from). The texts are the models'
# tokenizer_config.json chat_template, taken verbatim from llama.cpp's models/templates (written there
# by its scripts/get_chat_template.py) or its tests/test-chat-template.cpp.
LC = "llama.cpp's copy in models/templates"
LT = "as quoted in llama.cpp's tests/test-chat-template.cpp"
TEMPLATES = {
    "llama-3.1-instruct": ("<|begin_of_text|>", "<|eot_id|>", "meta-llama/Llama-3.1-8B-Instruct, the same text as Llama-3.3-70B-Instruct; " + LC),
    "llama-3.2-instruct": ("<|begin_of_text|>", "<|eot_id|>", "meta-llama/Llama-3.2-3B-Instruct; " + LC),
    "llama-3-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>", "meta-llama/Meta-Llama-3-8B-Instruct; " + LT),
    "mistral-7b-instruct-v0.1": ("<s>", "</s>", "mistralai/Mistral-7B-Instruct-v0.1 and v0.2, the 'v1' template with a system prompt; " + LT),
    "mistral-7b-instruct-v0.1-legacy": ("<s>", "</s>", "mistralai/Mistral-7B-Instruct-v0.1's first template; " + LT),
    "mistral-v3": ("<s>", "</s>", "mistralai's 'v3' template (Mistral-7B-Instruct-v0.3's tokenizer, Mistral-Large-Instruct-2407); " + LT),
    "mistral-nemo-instruct-2407": ("<s>", "</s>", "mistralai/Mistral-Nemo-Instruct-2407 ('v3-tekken'); " + LC),
    "mistral-small-3.2-instruct": ("<s>", "</s>", "mistralai/Mistral-Small-3.2-24B-Instruct-2506; " + LC),
    "qwen2.5-instruct": ("", "<|im_end|>", "Qwen/Qwen2.5-7B-Instruct (ChatML with a tools branch); " + LC),
    "qwen3": ("", "<|im_end|>", "Qwen/Qwen3-0.6B; " + LC),
    "qwq-32b": ("", "<|im_end|>", "Qwen/QwQ-32B; " + LC),
    "phi-3.5-mini-instruct": ("<s>", "<|endoftext|>", "microsoft/Phi-3.5-mini-instruct (also Phi-3-mini-4k-instruct's current one); " + LC),
    "phi-3-mini-4k-instruct-legacy": ("<s>", "<|endoftext|>", "microsoft/Phi-3-mini-4k-instruct's first template; " + LT),
    "gemma-2-it": ("<bos>", "<eos>", "google/gemma-2-2b-it; " + LC),
    "gemma-7b-it": ("<bos>", "<eos>", "google/gemma-7b-it; " + LT),
    "deepseek-r1-distill": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B; " + LC),
    "deepseek-v3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "deepseek-ai/DeepSeek-V3.1; " + LC),
    "gpt-oss": ("<|startoftext|>", "<|return|>", "openai/gpt-oss-120b; " + LC),
    "hermes-3-llama-3.1-tool-use": ("<|begin_of_text|>", "<|im_end|>", "NousResearch/Hermes-3-Llama-3.1-8B, tool_use variant; " + LC),
    "granite-3.3-instruct": ("<|end_of_text|>", "<|end_of_text|>", "ibm-granite/granite-3.3-2b-instruct; " + LC),
    "kimi-k2": ("[BOS]", "[EOS]", "moonshotai/Kimi-K2-Instruct; " + LC),
    "nemotron-nano-v2": ("<s>", "</s>", "nvidia/NVIDIA-Nemotron-Nano-9B-v2; " + LC),
    "functionary-medium-v3.1": ("<|begin_of_text|>", "<|eot_id|>", "meetkai/functionary-medium-v3.1 (Markup from |safe); " + LC),
    "functionary-medium-v3.2": ("<|begin_of_text|>", "<|eot_id|>", "meetkai/functionary-medium-v3.2; " + LC),
    "seed-oss": ("<seed:bos>", "<seed:eos>", "ByteDance-Seed/Seed-OSS-36B-Instruct (int dict keys, dictsort); " + LC),
    "chatml-openhermes": ("<s>", "<|im_end|>", "teknium/OpenHermes-2.5-Mistral-7B (plain ChatML); " + LT),
    "kiln-subset": ("<s>", "</s>", "kiln: every construct of the supported subset, on the messages"),
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYS, {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [SYS, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "assistant_last": [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "Yes."}],
    "unicode": [{"role": "user", "content": "héllo wörld — 你好 🎉 ¿qué?"},
                {"role": "assistant", "content": "ça va ✓ Ünïcödé\u00a0nbsp"},
                {"role": "user", "content": "日本語でお願いします"}],
    "special_chars": [{"role": "system", "content": "Quotes \" and ' and back\\slash\ttab"},
                      {"role": "user", "content": "  padded\n\nlines {{ not_a_tag }} {% raw %} <|im_end|> \u0001\x7f  \n"}],
    "empty_content": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": " "}],
    "thinking": [{"role": "user", "content": "Think first."},
                 {"role": "assistant", "content": "<think>\nsome reasoning\n</think>\n\nThe answer is 4."},
                 {"role": "user", "content": "And then?"}],
    "tool_message": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Calling."},
                     {"role": "tool", "content": "{\"temp\": 21}"}],
    "not_alternating": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "assistant_first": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}],
    "empty": [],
}


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def render(source, bos, eos, messages, add_generation_prompt, tools=None):
    chat_template_utils.datetime = FixedDatetime
    try:
        chat_template_utils._compile_jinja_template(source)
    except (jinja2.exceptions.TemplateSyntaxError, SyntaxError) as e:  # SyntaxError: "'break' outside loop"
        return {"error": str(e), "kind": "syntax"}
    try:
        out, _ = chat_template_utils.render_jinja_template(
            conversations=[messages], chat_template=source, add_generation_prompt=add_generation_prompt,
            tools=tools, bos_token=bos, eos_token=eos)
        return {"output": out[0]}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises a plain TemplateError; Jinja's own failures are subclasses of it
        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "runtime"
        return {"error": str(e), "kind": kind}
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
        return {"error": str(e), "kind": "runtime"}


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALL = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL_STR = {"id": "call67890", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"unit\": \"celsius\"}"}}
# (tools, messages): conversations with OpenAI-shaped tool definitions, tool calls and tool results,
# which kiln_chat_template_apply_json renders (chat_template_internal.h)
TOOL_CONVERSATIONS = {
    "tools_offered": ([WEATHER_TOOL], [SYS, {"role": "user", "content": "Weather in Paris?"}]),
    "tool_round_trip": ([WEATHER_TOOL], [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."},
        {"role": "user", "content": "And in Zürich?"}]),
    "tool_call_string_arguments": ([WEATHER_TOOL], [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL_STR]},
        {"role": "tool", "tool_call_id": "call67890", "name": "get_weather", "content": "cold"}]),
    "tool_calls_without_tools": (None, [
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "content": "warm"}]),
}

SNIPPET_MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def read_snippets():
    """snippets.txt's templates: one a line, the two-character escapes \\n, \\r and \\t stand for the
    characters (anything else, Jinja's own string escapes included, is left as written)."""
    with open(os.path.join(DATA, "snippets.txt"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    out = []
    for line in lines:
        text, i = [], 0
        while i < len(line):
            pair = line[i:i + 2]
            if pair in ("\\n", "\\r", "\\t"):
                text.append({"\\n": "\n", "\\r": "\r", "\\t": "\t"}[pair])
                i += 2
            else:
                text.append(line[i])
                i += 1
        out.append("".join(text))
    return out


def main():
    conversations = {name: {"messages": messages, "tools": None} for name, messages in CONVERSATIONS.items()}
    conversations.update({name: {"messages": messages, "tools": tools}
                          for name, (tools, messages) in TOOL_CONVERSATIONS.items()})
    cases = []
    for name, (bos, eos, _) in TEMPLATES.items():
        with open(os.path.join(DATA, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        for conv_name, conv in conversations.items():
            for agp in (False, True):
                case = {"template": name, "conversation": conv_name, "add_generation_prompt": agp}
                case.update(render(source, bos, eos, conv["messages"], agp, conv["tools"]))
                cases.append(case)
    snippets = []
    for source in read_snippets():
        case = {"template": source}
        case.update(render(source, "<s>", "</s>", SNIPPET_MESSAGES, True))
        snippets.append(case)
    doc = {
        "generator": "scripts/gen_chat_template_fixtures.py",
        "transformers": __import__("transformers").__version__,
        "jinja2": jinja2.__version__,
        "fixed_now": FIXED_NOW.isoformat(),
        "templates": {name: {"bos_token": bos, "eos_token": eos, "source": note}
                      for name, (bos, eos, note) in TEMPLATES.items()},
        "conversations": conversations,
        "cases": cases,
        "snippet_messages": SNIPPET_MESSAGES,
        "snippets": snippets,
    }
    with open(os.path.join(DATA, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases ({n_err} errors), {len(snippets)} snippets -> expected.json", file=sys.stderr)


if __name__ == "__main__":
    main()
