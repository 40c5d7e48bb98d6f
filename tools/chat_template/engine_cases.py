"""Small templates exercising each construct of the Jinja engine.

Each case is (name, template, variables). make_goldens.py renders them with
Python jinja2 under Hugging Face's settings and stores the outputs (or the
errors) in tests/tokenizer/data/chat/engine_goldens.json, which the C++ tests
compare against byte for byte.
"""

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
]

CASES = [
    # --- text, output, comments ------------------------------------------------
    ("plain_text", "Hello, world", {}),
    ("empty_template", "", {}),
    ("trailing_newline_dropped", "abc\n", {}),
    ("only_one_trailing_newline_dropped", "abc\n\n", {}),
    ("crlf_normalized", "a\r\nb\rc\n", {}),
    ("print_var", "Hello {{ name }}!", {"name": "Ann"}),
    ("print_undefined_is_empty", "[{{ nope }}]", {}),
    ("print_none", "{{ none }} {{ None }} {{ x }}", {"x": None}),
    ("print_bools", "{{ true }} {{ false }} {{ True }} {{ False }}", {}),
    ("print_ints", "{{ 0 }} {{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", {}),
    ("print_floats", "{{ 1.0 }} {{ 0.1 }} {{ 1.5e3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 2.5e-7 }} {{ 123456789.123 }} {{ -0.0 }}", {}),
    ("print_float_arith", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 / 2 }} {{ 10 / 4 }} {{ 1e300 * 1e10 }}", {}),
    ("print_list", "{{ [1, 'a', none, true, 1.5, [2]] }}", {}),
    ("print_tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }}", {}),
    ("print_dict", "{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}),
    ("print_json_data", "{{ x }}", {"x": {"k": "v", "n": [1, 2.5, True, None]}}),
    ("print_string_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'bs\\\\'] }}", {}),
    ("print_string_repr_unicode", "{{ ['héllo', '日本', '\\x00', '\\x7f', '\\u200b', 'emoji 😀'] }}", {}),
    ("print_tuple_expr", "{{ 1, 2 }}", {}),
    ("comment", "a{# a comment #}b", {}),
    ("comment_multiline", "a{# line1\nline2 #}b", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e\\\"f\\x41\\u00e9\\U0001F600\\101\\q' }}", {}),
    ("string_literal_unicode", "{{ 'héllo wörld ✓' }}", {}),
    ("string_literal_adjacent", "{{ 'a' 'b' \"c\" }}", {}),
    ("string_literal_multiline", "{{ 'a\nb' }}", {}),
    ("raw_block", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("raw_block_ws", "x\n  {%- raw %}  {{ x }}  {% endraw -%}\n  y", {}),

    # --- whitespace control --------------------------------------------------
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "  {% if true %}\n  yes\n  {% endif %}\nafter", {}),
    ("lstrip_not_after_text", "x {% if true %}y{% endif %}", {}),
    ("lstrip_tabs", "\t\t{% if true %}a{% endif %}\n", {}),
    ("lstrip_not_for_variables", "  {{ 'a' }}\n  {{ 'b' }}", {}),
    ("lstrip_comment", "a\n    {# c #}\nb", {}),
    ("minus_strips_both", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("minus_strips_newlines", "a\n\n  {{- 'x' -}}  \n\n b", {}),
    ("plus_disables_lstrip", "a\n  {%+ if true %}x{% endif %}", {}),
    ("plus_disables_trim", "{% if true +%}\nx{% endif %}", {}),
    ("comment_minus", "a  {#- c -#}  b", {}),
    ("comment_trim_blocks", "a{# c #}\nb", {}),
    ("variable_no_trim", "{{ 'a' }}\nb", {}),
    ("whitespace_only_lines", "{% for x in [1, 2] %}\n    {{ x }}\n{% endfor %}\n", {}),
    ("nested_blocks_indented", "{% for x in [1, 2] %}\n  {% if x > 1 %}\n    big {{ x }}\n  {% else %}\n    small {{ x }}\n  {% endif %}\n{% endfor %}", {}),
    ("unicode_whitespace_minus", "a\u00a0\u3000{{- 'b' -}}\u2003\nc", {}),
    ("lstrip_start_of_template", "   {% if true %}x{% endif %}", {}),
    ("lstrip_after_variable_line", "{{ 'a' }}\n   {% if true %}b{% endif %}", {}),
    ("lstrip_after_minus_newline", "{% if true -%}\n   {% if true %}x{% endif %}{% endif %}", {}),

    # --- if / elif / else ----------------------------------------------------
    ("if_elif_else", "{% for x in [0, 1, 2, 3] %}{% if x == 0 %}zero{% elif x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("if_truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, {'a': 1}, none, 0.0, 0.5] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    ("if_undefined_falsy", "{% if missing %}yes{% else %}no{% endif %}", {}),
    ("if_tuple_test", "{% if 0, 0 %}tuple-true{% endif %}", {}),

    # --- for loops -------------------------------------------------------------
    ("for_basic", "{% for x in items %}{{ x }},{% endfor %}", {"items": [1, 2, 3]}),
    ("for_else_empty", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for_else_undefined", "{% for x in missing %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.depth }}/{{ loop.depth0 }};{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }}|{% endfor %}", {}),
    ("for_prev_next_defined", "{% for x in [1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {}),
    ("for_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}", {}),
    ("for_filter_length", "{% for x in [1, 2, 3, 4] if x > 2 %}{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_tuple_unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}+{{ b }} {% endfor %}", {}),
    ("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("for_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}", {}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("for_outer_loop_alias", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [1] %}{{ outer.index }}{% endfor %}{% endfor %}", {}),
    ("for_break", "{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("for_continue", "{% for x in range(6) %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}", {}),
    ("for_break_first_runs_else", "{% for x in [1, 2] %}{% break %}{% else %}E{% endfor %}", {}),
    ("for_continue_all_runs_else", "{% for x in [1, 2] %}{% continue %}{% else %}E{% endfor %}", {}),
    ("for_scope_does_not_leak", "{% set x = 'outer' %}{% for i in [1, 2] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("for_scope_reset_each_iteration", "{% for i in [1, 2] %}[{{ y }}]{% set y = i %}{% endfor %}", {}),
    ("for_scope_outer_visible", "{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", {}),
    ("for_reversed_slice", "{% for m in msgs[::-1] %}{{ m.role }} {% endfor %}", {"msgs": MSGS}),
    ("for_loop_length_in_nested_if", "{% for x in [1, 2, 3] %}{% if loop.last %}last={{ x }}{% endif %}{% endfor %}", {}),
    ("for_over_none_error", "{% for x in none %}{% endfor %}", {}),
    ("for_over_int_error", "{% for x in 5 %}{% endfor %}", {}),
    ("for_unpack_mismatch_error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("loop_outside_is_undefined", "[{{ loop }}]", {}),
    ("loop_attribute_missing_error", "{% for x in [1] %}{{ loop.foo.bar }}{% endfor %}", {}),

    # --- set and namespace ---------------------------------------------------
    ("set_simple", "{% set x = 1 + 2 %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_tuple_paren", "{% set (a, b) = [3, 4] %}{{ b }}{{ a }}", {}),
    ("set_in_if_persists", "{% if true %}{% set x = 'in-if' %}{% endif %}{{ x }}", {}),
    ("set_shadows_context", "{% set messages = messages[1:] %}{{ messages | length }}", {"messages": MSGS}),
    ("set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper | trim %}  hello  {% endset %}[{{ x }}]", {}),
    ("namespace_basic", "{% set ns = namespace(count=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }}{{ ns.found }}", {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("namespace_print", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", {}),
    ("namespace_missing_attr_undefined", "{% set ns = namespace() %}[{{ ns.nope }}]{{ ns.nope is defined }}", {}),
    ("namespace_missing_attr_error", "{% set ns = namespace() %}{{ ns.nope.deeper }}", {}),
    ("namespace_getitem", "{% set ns = namespace(a=5) %}{{ ns['a'] }}", {}),
    ("set_attr_non_namespace_error", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("set_attr_undefined_error", "{% set nope.x = 1 %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),

    # --- macros and call blocks ---------------------------------------------------
    ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_missing_arg_undefined", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("macro_late_binding", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_default_uses_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("macro_too_many_args_error", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_returns_string", "{% macro m() %}42{% endmacro %}{{ m() ~ '!' }} {{ m() | length }}", {}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", {}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
    ("generation_block", "{% for m in msgs %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}", {"msgs": MSGS}),

    # --- expressions -----------------------------------------------------------
    ("arith_int", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", {}),
    ("arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 0.5 }} {{ 1 + 1.0 }} {{ true + 1 }}", {}),
    ("arith_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 100 / 10 / 5 }}", {}),
    ("arith_concat_precedence", "{{ (1 + 2) ~ 3 * 2 }} {{ 2 ~ 3 * 2 }} {{ 'a' ~ (1 + 2) }}", {}),
    ("arith_concat_binds_tighter_error", "{{ 'a' ~ 1 + 2 }}", {}),
    ("string_plus", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 3 }} {{ [1] + [2] }}", {}),
    ("string_plus_int_error", "{{ 'a' + 1 }}", {}),
    ("none_plus_error", "{{ none + 1 }}", {}),
    ("undefined_plus_error", "{{ missing + 1 }}", {}),
    ("undefined_attr_plus_error", "{{ d.missing + 'x' }}", {"d": {}}),
    ("division_by_zero_error", "{{ 1 / 0 }}", {}),
    ("tilde_concat", "{{ 'a' ~ 1 ~ none ~ missing ~ [1] ~ true }}", {}),
    ("compare_ops", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 4 >= 4 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}", {}),
    ("compare_chained", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }}", {}),
    ("compare_mixed_eq", "{{ 1 == '1' }} {{ none == none }} {{ none == 0 }} {{ true == 1 }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }}", {}),
    ("compare_undefined_eq", "{{ missing == missing2 }} {{ missing == none }} {{ missing != 1 }}", {}),
    ("compare_unorderable_error", "{{ 1 < 'a' }}", {}),
    ("compare_undefined_order_error", "{{ missing < 1 }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in missing }} {{ 'x' not in missing }}", {}),
    ("in_string_needs_string_error", "{{ 1 in 'abc' }}", {}),
    ("in_none_error", "{{ 'a' in none }}", {}),
    ("logic_ops_return_operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or none }} {{ not 0 }} {{ not 'a' }} {{ missing or 'dflt' }}", {}),
    ("logic_short_circuit", "{{ false and missing.attr }} {{ true or missing.attr }}", {}),
    ("not_precedence", "{{ not 1 == 2 }} {{ not true and false }} {{ not (true and false) }}", {}),
    ("condexpr", "{{ 'yes' if true else 'no' }} {{ 'yes' if false else 'no' }} [{{ 'yes' if false }}] {{ 1 if false else 2 if true else 3 }}", {}),
    ("condexpr_undefined_else_attr_error", "{{ ('yes' if false).foo }}", {}),
    ("unary", "{{ -5 }} {{ +5 }} {{ -(-5) }} {{ - 2.5 }} {{ -x }}", {"x": 3}),
    ("unary_minus_filter", "{{ -3 | abs }} {{ -(3 | abs) }}", {}),
    ("list_dict_literals", "{{ [1, 2,] | length }} {{ {'a': 1, 'b': 2,} | length }} {{ [] }} {{ {} }}", {}),
    ("dict_int_keys", "{{ {1: 'a', 2: 'b'}[2] }} {{ {1: 'x'} }}", {}),
    ("attr_and_item", "{{ m.role }} {{ m['role'] }} {{ l[0] }} {{ l[-1] }} {{ l.0 }} {{ s[1] }} {{ s[-1] }}", {"m": {"role": "user"}, "l": [10, 20, 30], "s": "héllo"}),
    ("item_missing_undefined", "[{{ l[10] }}][{{ d['nope'] }}][{{ d.nope }}][{{ s[99] }}]", {"l": [1], "d": {}, "s": "ab"}),
    ("item_missing_error", "{{ l[10].x }}", {"l": [1]}),
    ("attr_on_undefined_error", "{{ missing.attr }}", {}),
    ("attr_on_none_error", "{{ x.y.z }}", {"x": None}),
    ("attr_on_dict_missing_error", "{{ d.a.b }}", {"d": {}}),
    ("item_on_undefined_error", "{{ missing[0] }}", {}),
    ("call_undefined_error", "{{ missing() }}", {}),
    ("call_non_callable_error", "{{ 'abc'() }}", {}),
    ("dict_method_vs_key", "{{ d.items() | list }} {{ d['items'] }} {{ d.get('items') }}", {"d": {"items": "key-items", "a": 1}}),
    ("slices", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[1:-1] }} {{ l[5:] }} {{ l[:-10] }} {{ l[3:1:-1] }}", {"l": [1, 2, 3, 4, 5]}),
    ("string_slices", "{{ s[1:] }} {{ s[::-1] }} {{ s[:3] }} {{ s[-2:] }}", {"s": "héllo😀"}),
    ("slice_step_zero_error", "{{ [1, 2][::0] }}", {}),
    ("call_kwargs", "{{ d.get('x', 'default') }} {{ d.get('a') }} {{ d.get('nope') }}", {"d": {"a": 1}}),
    ("range_global", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}),
    ("range_too_big_error", "{{ range(1000000) | length }}", {}),
    ("dict_global", "{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }}", {}),
    ("joiner_global", "{% set j = joiner(' | ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}", {}),
    ("raise_exception", "{% if x %}{{ raise_exception('Bad input: ' ~ x) }}{% endif %}ok", {"x": "boom"}),
    ("raise_exception_not_called", "{% if x %}{{ raise_exception('never') }}{% endif %}ok", {"x": ""}),
    ("strftime_now_defined", "{{ strftime_now is defined }}", {}),
    ("list_append_unsafe_error", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("list_append_attr_is_undefined", "[{{ [1].append }}]", {}),
    ("integer_overflow_ok", "{{ 2 ** 62 }} {{ 9223372036854775807 }}", {}),

    # --- tests ---------------------------------------------------------------
    ("tests_defined", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ x is not defined }} {{ d.k is defined }} {{ d.z is defined }}", {"x": 1, "d": {"k": None}}),
    ("tests_none", "{{ x is none }} {{ y is none }} {{ x is not none }} {{ missing is none }}", {"x": None, "y": 0}),
    ("tests_types", "{% for v in [1, 1.5, 'a', [1], {'a': 1}, true, none] %}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is boolean }}{{ v is callable }} {% endfor %}", {}),
    ("tests_undefined_types", "{{ missing is iterable }} {{ missing is sequence }} {{ missing is string }} {{ missing is mapping }}", {}),
    ("tests_true_false", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}", {}),
    ("tests_compare", "{{ 3 is eq 3 }} {{ 3 is equalto(3) }} {{ 3 is ne 4 }} {{ 3 is lt 4 }} {{ 3 is le 3 }} {{ 3 is gt 2 }} {{ 3 is ge 4 }} {{ 3 is greaterthan 1 }} {{ 3 is lessthan 1 }} {{ [1, 2, 3] | select('==', 2) | list }} {{ [1, 2, 3] | reject('<=', 2) | list }}", {}),
    ("tests_numbers", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 4.0 is even }}", {}),
    ("tests_strings", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ '123' is upper }}", {}),
    ("tests_in", "{{ 2 is in [1, 2] }} {{ 'x' is in 'abc' }}", {}),
    ("tests_sameas", "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas true }} {{ x is sameas x }}", {"x": [1]}),
    ("tests_filter_test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}", {}),
    ("tests_escaped", "{{ 'a' is escaped }}", {}),
    ("test_no_parens_arg_then_and", "{{ x is defined and x is not none }}", {"x": 1}),
    ("test_precedence_with_plus", "{{ 1 + 2 is odd }}", {}),

    # --- filters ---------------------------------------------------------------
    ("f_trim", "[{{ '  a b \\n' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ '\\u3000a\\u00a0' | trim }}][{{ missing | trim }}][{{ 5 | trim }}]", {}),
    ("f_length", "{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ missing | length }} {{ 'abc' | count }}", {}),
    ("f_length_int_error", "{{ 5 | length }}", {}),
    ("f_case", "{{ 'hello World' | upper }} {{ 'HeLLo' | lower }} {{ 'hello wORLD-foo bar(baz' | title }} {{ 'hELLO world' | capitalize }} {{ 'Élan ÀB' | lower }} {{ 'straße' | title }}", {}),
    ("f_replace", "{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c' | replace('-', '', 1) }} {{ 'abc' | replace('', '.') }} {{ 5 | replace('5', 'five') }}", {}),
    ("f_join", "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ [{'n': 'x'}, {'n': 'y'}] | join('/', attribute='n') }} {{ [none, true] | join('-') }}", {}),
    ("f_default", "{{ missing | default('d') }} {{ missing | d('dd') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ 0 | d(5, boolean=true) }} [{{ missing | default }}]", {}),
    ("f_first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ {'a': 1, 'b': 2} | first }} [{{ [] | first }}]", {}),
    ("f_first_empty_attr_error", "{{ ([] | first).x }}", {}),
    ("f_list", "{{ 'ab' | list }} {{ {'a': 1} | list }} {{ (1, 2) | list }} {{ missing | list }}", {}),
    ("f_items", "{{ {'a': 1, 'b': [2]} | items | list }} {{ missing | items | list }}", {}),
    ("f_items_error", "{{ [1] | items | list }}", {}),
    ("f_string_int_float", "{{ 5 | string }}{{ (5 | string) is string }} {{ '42' | int + 1 }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ true | int }} {{ '0x1A' | int(0, 16) }} {{ ' 12 ' | int }} {{ '1_000' | int }}", {}),
    ("f_float", "{{ '1.5' | float }} {{ 2 | float }} {{ 'x' | float }} {{ 'x' | float(1.5) }} {{ ' 1e3 ' | float }} {{ 'inf' | float }} {{ none | float }}", {}),
    ("f_abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 7 | round }} {{ -0.5 | round }} {{ 1234.5678 | round(-2) }}", {}),
    ("f_map", "{{ msgs | map(attribute='role') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ [[1], []] | map('length') | join(',') }} {{ [{'a': 1}, {}] | map(attribute='a', default=0) | list }}", {"msgs": MSGS}),
    ("f_map_missing_attr", "{{ [{'a': 1}, {}] | map(attribute='a') | list }}", {}),
    ("f_select_reject", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ [1, 5, 9] | select('gt', 4) | list }} {{ ['a', 'b'] | select('in', 'abc') | list }}", {}),
    ("f_selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'system') | list | length }} {{ [{'a': 1}, {'a': 0}, {}] | selectattr('a') | list }} {{ msgs | selectattr('role', 'in', ['user', 'system']) | list | length }}", {"msgs": MSGS}),
    ("f_selectattr_defined", "{{ [{'a': 1}, {'b': 2}] | selectattr('a', 'defined') | list }}", {}),
    ("f_unique", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} {{ ['a', 'A'] | unique(true) | list }}", {}),
    ("f_sort", "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(true) }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }}", {}),
    ("f_dictsort", "{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}", {}),
    ("f_reverse", "{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }}", {}),
    ("f_sum_min_max", "{{ [1, 2, 3] | sum }} {{ [{'v': 1}, {'v': 2.5}] | sum(attribute='v') }} {{ [1, 2] | sum(start=10) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A', 'c'] | max }} {{ [{'v': 1}, {'v': 5}] | max(attribute='v') }}", {}),
    ("f_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}|{{ 'a\\r\\nb' | indent(1) }}", {}),
    ("f_escape_safe", "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | escape }} {{ '<b>' | safe }}", {}),
    ("f_batch", "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 'x') | list }}", {}),
    ("f_center_wordcount", "[{{ 'ab' | center(7) }}] {{ 'hello big_world, 42!' | wordcount }}", {}),
    ("f_attr", "{{ d | attr('a') }} [{{ d | attr('b') }}]", {"d": {"a": 1}}),
    ("f_chained", "{{ '  Hello  ' | trim | lower | replace('l', 'L') | length }}", {}),
    ("f_filter_args_precedence", "{{ [1, 2, 3] | join('-') ~ '!' }} {{ 'ab' | upper ~ 'c' | upper }}", {}),

    # --- tojson (Hugging Face's: json.dumps, ensure_ascii=False) -----------------------
    ("tojson_basic", "{{ x | tojson }}", {"x": {"name": "get_weather", "args": {"city": "Paris", "days": 3, "ok": True, "none": None, "f": 1.5, "l": [1, "two"]}}}),
    ("tojson_unicode_and_escapes", "{{ x | tojson }}", {"x": "héllo \"q\" \\ \n\t\r\b\f \u0001 \u007f \u2028 😀 </script> & ' <"}),
    ("tojson_ensure_ascii", "{{ x | tojson(ensure_ascii=true) }}", {"x": "héllo 😀 \u007f"}),
    ("tojson_indent", "{{ x | tojson(indent=2) }}", {"x": {"a": [1, {"b": []}], "c": {}, "d": "e"}}),
    ("tojson_indent_string", "{{ x | tojson(indent='\\t') }}", {"x": {"a": [1, 2]}}),
    ("tojson_indent_zero", "{{ x | tojson(indent=0) }}", {"x": {"a": [1, 2]}}),
    ("tojson_separators_sort", "{{ x | tojson(separators=(',', ':'), sort_keys=true) }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("tojson_scalars", "{{ 1 | tojson }} {{ 1.0 | tojson }} {{ 1e20 | tojson }} {{ 'a' | tojson }} {{ none | tojson }} {{ true | tojson }} {{ (1, 2) | tojson }} {{ {1: 'a', none: 'b', 1.5: 'c', true: 'd'} | tojson }}", {}),
    ("tojson_floats", "{{ x | tojson }}", {"x": [0.1, 1e-7, 123456789012345680.0, -0.0, 3.14159]}),
    ("tojson_undefined_error", "{{ missing | tojson }}", {}),
    ("tojson_namespace_error", "{{ namespace(a=1) | tojson }}", {}),

    # --- string methods --------------------------------------------------------
    ("m_strip", "[{{ '  a  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ '\\n\\nx\\n'.lstrip('\\n') }}][{{ 'abcba'.strip('ab') }}]", {}),
    ("m_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b \\t c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b c'.split(maxsplit=1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split(',') }} {{ ''.split() }} {{ 'a</think>b</think>c'.split('</think>')[-1] }}", {}),
    ("m_split_empty_sep_error", "{{ 'abc'.split('') }}", {}),
    ("m_splitlines", "{{ 'a\\nb\\r\\nc\\rd\\n'.splitlines() }} {{ 'a\\nb'.splitlines(true) }}", {}),
    ("m_startswith_endswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.endswith('x') }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.endswith('l', 0, 4) }}", {}),
    ("m_case", "{{ 'hello world'.upper() }} {{ 'HELLO'.lower() }} {{ 'hello wORLD'.title() }} {{ 'hello World'.capitalize() }} {{ 'they\\'re bill\\'s'.title() }} {{ 'aBc'.swapcase() }}", {}),
    ("m_find_count", "{{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }} {{ 'aaa'.count('') }}", {}),
    ("m_index_missing_error", "{{ 'hello'.index('z') }}", {}),
    ("m_replace", "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }}", {}),
    ("m_join", "{{ ', '.join(['a', 'b']) }} {{ ''.join('abc') }}", {}),
    ("m_join_type_error", "{{ ', '.join([1, 2]) }}", {}),
    ("m_is_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }}", {}),
    ("m_misc", "{{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.txt'.removesuffix('.txt') }} [{{ 'ab'.center(6, '*') }}] [{{ 'ab'.ljust(4) }}] [{{ 'ab'.rjust(4, '0') }}] {{ '42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}", {}),
    ("m_unknown_attr_undefined", "[{{ 'abc'.nope }}]{{ 'abc'.nope is defined }}", {}),
    ("m_unknown_call_error", "{{ 'abc'.nope() }}", {}),
    ("m_dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z', 0) }}", {"d": {"a": 1, "b": 2}}),
    ("m_list_methods", "{{ [1, 2, 3].index(2) }} {{ [1, 1, 2].count(1) }}", {}),
    ("qwen_think_split", "{% set c = content.split('</think>')[-1].lstrip('\\n') %}{% set r = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", {"content": "<think>\nreasoning here\n</think>\n\nThe answer."}),

    # --- syntax errors (parse time) ---------------------------------------------
    ("syntax_unknown_tag", "line1\n{% frobnicate %}", {}),
    ("syntax_unclosed_if", "{% if true %}\nabc\n", {}),
    ("syntax_unclosed_for", "{% for x in y %}{% if x %}{% endif %}", {}),
    ("syntax_wrong_end", "{% if true %}{% endfor %}", {}),
    ("syntax_bad_expression", "{{ 1 + }}", {}),
    ("syntax_unclosed_variable", "abc {{ x ", {}),
    ("syntax_unclosed_comment", "abc {# x ", {}),
    ("syntax_unknown_filter", "\n\n{{ x | nosuchfilter }}", {}),
    ("syntax_unknown_test", "{{ x is nosuchtest }}", {}),
    ("syntax_unexpected_char", "{{ x $ y }}", {}),
    ("syntax_unbalanced", "{{ (1 + 2 }}", {}),
    ("syntax_unexpected_bracket", "{{ 1 ] }}", {}),
    ("syntax_unterminated_string", "{{ 'abc }}", {}),
    ("syntax_assign_to_literal", "{% set 1 = 2 %}", {}),
    ("syntax_break_outside_loop", "{% break %}", {}),
    ("syntax_elif_after_else", "{% if a %}{% else %}{% elif b %}{% endif %}", {}),
    ("syntax_kwarg_before_positional", "{{ f(a=1, 2) }}", {}),
    ("syntax_chained_is", "{{ x is defined is none }}", {}),
    ("syntax_empty_print", "{{ }}", {}),
    ("syntax_missing_in", "{% for x y %}{% endfor %}", {}),
]


def random_whitespace_cases(seed=7, count=300):
    """Random nestings of tags, text and whitespace with random -/+ markers.

    Whitespace control (trim_blocks, lstrip_blocks, '-' and '+') is where an
    engine most easily differs from jinja2; these cases cover its combinations
    far beyond what hand-written ones do. Deterministic for a given seed.
    """
    import random

    rng = random.Random(seed)
    texts = ["a", "b c", " ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "\t\n\t", "x\n  y", "é ", "\u3000"]

    def sign(allow_plus=True):
        return rng.choice(["", "", "-", "+"] if allow_plus else ["", "", "-"])

    def text():
        return "".join(rng.choice(texts) for _ in range(rng.randint(0, 3)))

    def block(depth):
        kind = rng.choice(["text", "var", "comment", "set", "if", "for", "raw"] if depth < 3 else
                          ["text", "var", "comment", "set"])
        if kind == "text":
            return text()
        if kind == "var":
            return "{{" + sign(False) + " v " + sign(False) + "}}"
        if kind == "comment":
            return "{#" + sign() + " note " + sign() + "#}"
        if kind == "set":
            return "{%" + sign() + " set v = v ~ '.' " + sign() + "%}"
        if kind == "raw":
            return "{%" + sign() + " raw " + sign(False) + "%}" + text() + "{{ raw }}" + text() + \
                "{%" + sign() + " endraw " + sign() + "%}"
        body = "".join(block(depth + 1) for _ in range(rng.randint(1, 3)))
        if kind == "if":
            other = "".join(block(depth + 1) for _ in range(rng.randint(0, 2)))
            return ("{%" + sign() + " if v " + sign() + "%}" + body + "{%" + sign() + " else " + sign() +
                    "%}" + other + "{%" + sign() + " endif " + sign() + "%}")
        return ("{%" + sign() + " for i in [1, 2] " + sign() + "%}" + body + "{{ i }}" + "{%" + sign() +
                " endfor " + sign() + "%}")

    cases = []
    for n in range(count):
        template = "".join(block(0) if rng.random() < 0.7 else text() for _ in range(rng.randint(1, 5)))
        cases.append((f"random_ws_{n:03d}", template, {"v": "V"}))
    return cases


CASES += random_whitespace_cases()


def random_expression_cases(seed=11, count=600):
    """Random expressions over literals, variables, operators, filters, tests
    and methods, printed with {{ }}: checks Python semantics (repr, numbers,
    comparisons, str methods, filters) far beyond the hand-written cases.
    Errors only need to be errors of the same kind (their wording may differ).
    Filters that return generators in jinja2 are followed by `| list`: vpod
    evaluates them eagerly, so only a consumed generator behaves the same.
    """
    import random

    rng = random.Random(seed)
    variables = {
        "s": "Hello, Wörld! ",
        "e": "",
        "n": 7,
        "m": -3,
        "f": 2.5,
        "z": 0,
        "t": True,
        "l": [3, 1, 2],
        "w": ["b", "A", "c", "a"],
        "d": {"k": "v", "n": 1, "x": [1, 2]},
        "msgs": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo\n"}],
        "nil": None,
    }
    atoms = ["s", "e", "n", "m", "f", "z", "t", "l", "w", "d", "msgs", "nil", "undef", "0", "1", "-1", "2",
             "10", "3.5", "0.1", "1e3", "'a'", "'ab c'", "\"it's\"", "'é😀'", "''", "true", "false", "none",
             "[]", "[1, 'x']", "{}", "{'a': 1}", "(1, 2)", "d.k", "d['n']", "d.x", "l[0]", "l[-1]", "w[1:]",
             "msgs[0].content", "msgs[-1]['role']", "s[::-1]", "s[2:5]", "d.missing", "l[9]"]
    binops = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in",
              "and", "or"]
    filters = ["length", "upper", "lower", "title", "capitalize", "trim", "string", "int", "float", "abs",
               "round", "first", "last", "list", "sort", "unique | list", "reverse | list", "tojson", "join",
               "join(', ')",
               "default('D')", "default('D', true)", "replace('l', 'L')", "sum", "min", "max",
               "dictsort", "batch(2) | list", "indent(2)", "center(9)", "wordcount", "map('upper') | list",
               "map(attribute='role') | list", "select('odd') | list", "reject('none') | list",
               "selectattr('role', 'eq', 'user') | list", "map('string') | join('-')", "tojson(indent=1)",
               "e", "count", "int(5)", "float(1.5)", "round(1, 'ceil')", "sort(reverse=true)",
               "unique(true) | list", "first | string", "trim('H')", "items | list"]
    tests = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable",
             "sequence", "boolean", "true", "false", "odd", "even", "divisibleby 3", "eq 7", "lt 3",
             "in [1, 2, 3]", "lower", "upper", "callable", "sameas none"]
    methods = ["strip()", "lstrip('H')", "rstrip()", "split()", "split(',')", "split(' ', 1)", "rsplit(',', 1)",
               "startswith('He')", "endswith(' ')", "upper()", "lower()", "title()", "replace('o', '0')",
               "find('o')", "count('l')", "splitlines()", "isdigit()", "capitalize()", "get('k')",
               "get('zz', 0)", "items()", "keys()", "values()", "index(1)", "strip('! ')", "zfill(4)",
               "partition(',')", "removeprefix('He')"]

    def expr(depth):
        r = rng.random()
        if depth >= 3 or r < 0.3:
            return rng.choice(atoms)
        if r < 0.55:
            op = rng.choice(binops)
            return f"({expr(depth + 1)} {op} {expr(depth + 1)})"
        if r < 0.72:
            return f"({expr(depth + 1)} | {rng.choice(filters)})"
        if r < 0.82:
            neg = rng.choice(["", "not "])
            return f"({expr(depth + 1)} is {neg}{rng.choice(tests)})"
        if r < 0.92:
            return f"{rng.choice(['s', 'd', 'l', 'w', 'e', 'msgs[0].content', 'd.k', 'n'])}.{rng.choice(methods)}"
        if r < 0.96:
            return f"({expr(depth + 1)} if {expr(depth + 1)} else {expr(depth + 1)})"
        return f"(not {expr(depth + 1)})"

    cases = []
    for n in range(count):
        cases.append((f"random_expr_{n:03d}", "{{ " + expr(0) + " }}", variables))
    return cases


# Random expressions whose errors are compared by kind only.
LOOSE_ERROR_PREFIX = "random_expr_"
CASES += random_expression_cases()
