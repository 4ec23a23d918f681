#!/usr/bin/env python3
"""Renders every chat template with jinja2 exactly as transformers' apply_chat_template does and
stores the expected output (or the expected error) as tests/chat/fixtures/<name>.json.

Run: /opt/refenv/bin/python tests/reference/make_chat_template_fixtures.py [templates_dir] [hf_dir]

The environment is transformers' own (_compile_jinja_template: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, the generation tag, its tojson override, raise_exception);
only strftime_now is pinned to 2026-01-15 so the fixtures are reproducible.
"""
import datetime as _dt
import json
import os
import sys

from transformers.utils import chat_template_utils as ctu

PINNED_NOW = _dt.datetime(2026, 1, 15, 9, 30, 0)


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


ctu.datetime = _PinnedDatetime  # strftime_now() calls datetime.now()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(ROOT, "tests", "chat", "fixtures")

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello, who are you?"}
ASSISTANT = {"role": "assistant", "content": "I am an assistant — héllo ✓."}
USER2 = {"role": "user", "content": "  Tell me a \"joke\".\nPlease.  "}

TOOL_MESSAGES = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    }]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
     "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
]

TWO_CALLS = [
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_b", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
    ]},
    {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_b", "name": "get_weather", "content": "rain"},
    {"role": "assistant", "content": "Paris is sunny; Oslo has rain."},
    {"role": "user", "content": "Thanks!"},
]

CONTENT_PARTS = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "Say hi."}, {"type": "text", "text": "Twice."}]},
]

REASONING = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\n4", "reasoning_content": "Simple sum."},
    {"role": "user", "content": "And 3+3?"},
]

BASE_EXTRA = {"bos_token": "<s>", "eos_token": "</s>"}

CASES = [
    ("system_user", [SYSTEM, USER], True, {}),
    ("user_only", [USER], True, {}),
    ("user_only_no_prompt", [USER], False, {}),
    ("multi_turn", [SYSTEM, USER, ASSISTANT, USER2], True, {}),
    ("ends_with_assistant", [USER, ASSISTANT], False, {}),
    ("no_thinking", [USER], True, {"enable_thinking": False}),
    ("tool_use", TOOL_MESSAGES, True, {"tools": TOOLS}),
    ("two_tool_calls", TWO_CALLS, True, {"tools": TOOLS}),
    ("content_parts", CONTENT_PARTS, True, {}),
    ("reasoning", REASONING, True, {}),
]


# Small templates that pin down engine semantics one feature at a time (rendered with the same
# environment; context: x = the dict below, messages = [USER]).
SNIPPET_CONTEXT = {"d": {"b": 1, "a": [1, 2.5, None, True, "é\"\n"]}, "s": "  Hello World  ", "n": 7,
                   "f": 0.1, "e": "", "l": [3, 1, 2], "u": "naïve ✓ 😀"}
SNIPPETS = [
    "{{ d }}", "{{ d | tojson }}", "{{ d | tojson(indent=2) }}", "{{ d | tojson(sort_keys=true) }}",
    "{{ d.a | tojson(ensure_ascii=true) }}", "{{ u | tojson(ensure_ascii=true) }}", "{{ d.a }}",
    "{{ d.items() | list }}", "{{ d | dictsort }}", "{{ d.keys() | list }}{{ d.values() | list | length }}",
    "{{ f * 3 }} {{ n / 2 }} {{ n // 2 }} {{ -n % 3 }} {{ 2 ** 10 }} {{ 1e300 * 1e10 }} {{ 1/3 }}",
    "{{ 123456789012345678 }} {{ 1.5e-7 }} {{ 12345678901234567.0 }} {{ 100.0 }} {{ -0.0 }}",
    "{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' Hd') }}",
    "{{ s.split() }}{{ s.split(' ') }}{{ s.split('l', 1) }}{{ s.rsplit('l', 1) }}",
    "{{ s | upper }}{{ s | lower }}{{ 'hello wORLD' | title }}{{ 'hello wORLD' | capitalize }}",
    "{{ u | length }}{{ u[::-1] }}{{ u[1:4] }}{{ u | list | length }}{{ u.upper() }}",
    "{{ l | sort }}{{ l | sort(reverse=true) }}{{ l | max }}{{ l | min }}{{ l | sum }}{{ l | first }}{{ l | last }}",
    "{{ l | reverse | list }}{{ l[::-1] }}{{ l[1:] }}{{ l[-2:] }}{{ l[:-1] }}{{ l[::2] }}",
    "{{ l | join(', ') }}|{{ l | map('string') | join }}|{{ [1, 1, 2] | unique | list }}",
    "{{ [{'a': 1}, {'a': 2}, {}] | selectattr('a') | list }}{{ [{'a': 1}, {'a': 2}] | rejectattr('a', 'equalto', 1) | list }}",
    "{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3, 4] | reject('even') | list }}",
    "{{ [{'n': 'x'}, {'m': 1}] | map(attribute='n') | list }}{{ [{'n': 'x'}, {'m': 1}] | map(attribute='n', default='z') | list }}",
    "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}",
    "{{ missing | default('d') }}{{ e | default('d') }}{{ e | default('d', true) }}{{ none | default('d') }}",
    "{{ 'x' | replace('x', 'y') }}{{ 'aaa' | replace('a', 'b', 2) }}{{ 'aaa'.replace('a', '') }}",
    "{{ '3' | int + 1 }}{{ '3.7' | int }}{{ 'z' | int(5) }}{{ '2.5' | float }}{{ 3 | float }}{{ -3 | abs }}{{ 2.567 | round(2) }}{{ 2.5 | round }}",
    "{{ n is number }}{{ true is number }}{{ n is integer }}{{ f is float }}{{ none is none }}{{ missing is undefined }}",
    "{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}{{ s is iterable }}{{ missing is iterable }}",
    "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ true is boolean }}{{ n is odd }}{{ n is divisibleby 7 }}",
    "{{ 1 in l }}{{ 'b' in d }}{{ 'ell' in s }}{{ 5 not in l }}{{ n is in [7] }}{{ n is eq 7 }}{{ n is ne 7 }}",
    "{{ 1 < 2 < 3 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 == 1.0 }}{{ none == none }}{{ 'a' != 'a' }}",
    "{{ 1 and 'x' }}|{{ 0 or '' }}|{{ not l }}|{{ e or 'fallback' }}|{{ 'y' if n > 5 else 'n' }}|{{ 'y' if n < 5 }}|",
    "{{ 'a' ~ 1 ~ none ~ true ~ missing }}{{ 'ab' * 3 }}{{ [1] * 2 }}{{ [1] + [2] }}",
    "{% for k, v in d.items() %}{{ loop.index }}{{ k }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for x in l %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.length }}{{ loop.cycle('a', 'b') }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }}{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}{% for x in [] %}{% else %}empty{% endfor %}",
    "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    "{% set ns = namespace(count=0, items=[]) %}{% for x in l %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }}",
    "{% set v = 1 %}{% for x in l %}{% set v = x %}{{ v }}{% endfor %}{{ v }}{% if true %}{% set v = 9 %}{% endif %}{{ v }}",
    "{% macro m(a, b=2, c='c') -%}[{{ a }}|{{ b }}|{{ c }}]{%- endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='z') }}{{ m() }}",
    "{% set blk %}  inner {{ n }}  {% endset %}[{{ blk }}]{% set blk2 | upper %}up{% endset %}{{ blk2 }}",
    "{% filter upper %}abc{{ n }}{% endfilter %}{% filter trim %}   x   {% endfilter %}",
    "line1\n  {% if true %}\n    indented\n  {% endif %}\nline2\n",
    "a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e {# comment #}\n f {#- c -#} g",
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}|{% if e %}x{% elif not e %}y{% endif %}",
    "{{ '{}-{}'.format(1, 'a') }}{{ '{0}{0}'.format('x') }}{{ '{name}!'.format(name='hi') }}{{ '%s=%d' % ('a', 3) }}",
    "{{ 'a,b'.split(',') | length }}{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abcabc'.find('c') }}{{ 'abc'.count('b') }}",
    "{{ dict(a=1, b=2) }}{{ namespace(a=1).a }}{{ range(3) | list }}{{ range(1, 10, 3) | list }}",
    "{{ {'k': 'v'}['k'] }}{{ {'k': 'v'}.k }}{{ {'k': 'v'}.get('z', 'dflt') }}{{ {'k': 'v'}.get('z') }}{{ {1: 'one'}[1] }}",
    "{{ messages[0].role }}{{ messages[0]['content'] }}{{ messages | length }}{{ messages[-1].missing is defined }}",
    "{{ (1, 2) }}{{ (1,) }}{{ () }}{{ [] }}{{ {} }}{{ \"it's\" }}{{ ['a\\b'] }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %A %B %b %d') }}",
    "{{ raise_exception('boom: ' ~ n) }}",
    "{{ missing.attr }}",
    "{{ 'a' + 1 }}",
    "{{ l.append(4) }}",
    "{{ d | tojson | safe }}{{ '<b>' | e }}{{ '<' | safe + '<' }}",
    "{{ d.a | map('string') | tojson }}",
    "{% for i in 5 %}{% endfor %}",
]


def make_snippets():
    out = []
    for src in SNIPPETS:
        case = {"template": src}
        try:
            case["expected"] = render(src, [USER], True, dict(BASE_EXTRA, **SNIPPET_CONTEXT))
        except Exception as e:  # noqa: BLE001
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return {"context": dict(BASE_EXTRA, **SNIPPET_CONTEXT), "messages": [USER], "snippets": out}


def render(source, messages, add_generation_prompt, extra):
    template = ctu._compile_jinja_template(source)
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt, **extra)


def make_fixture(name, source):
    cases = []
    for case_name, messages, agp, extra in CASES:
        extra = dict(BASE_EXTRA, **extra)
        case = {"name": case_name, "messages": messages, "add_generation_prompt": agp, "extra": extra}
        try:
            case["expected"] = render(source, messages, agp, extra)
        except Exception as e:  # noqa: BLE001 - the expected error is part of the fixture
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return {"name": name, "template": source, "cases": cases}


def main():
    tmpl_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "tokenizers", "chat-templates")
    hf_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "..", "shared", "data", "tokenizers", "hf")
    sources = {}
    for f in sorted(os.listdir(tmpl_dir)):
        if f.endswith(".jinja"):
            with open(os.path.join(tmpl_dir, f), encoding="utf-8") as fh:
                sources[f[:-len(".jinja")]] = fh.read()
    for d in sorted(os.listdir(hf_dir)):
        p = os.path.join(hf_dir, d, "tokenizer_config.json")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as fh:
                t = json.load(fh).get("chat_template")
            if isinstance(t, str):
                sources["hf-" + d] = t
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(os.path.dirname(OUT_DIR), "snippets.json"), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(make_snippets(), ensure_ascii=False, indent=1) + "\n")
    total = 0
    for name, src in sources.items():
        fx = make_fixture(name, src)
        data = json.dumps(fx, ensure_ascii=False, indent=1) + "\n"
        total += len(data.encode())
        with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as fh:
            fh.write(data)
        errs = sum(1 for c in fx["cases"] if "error" in c)
        print(f"{name}: {len(fx['cases'])} cases, {errs} errors")
    print(f"{len(sources)} fixtures, {total} bytes")


if __name__ == "__main__":
    main()
