"""The model's entry function as C text: kernel calls over the inputs, outputs, weights and
workspace, size arguments, and the copies of outputs no kernel writes."""

import pytest

from ember.codegen.entry import render_entry
from ember.program import Arg, Copy, Launch, Ref


def call(kernel, refs, sizes, comment=""):
    """A launch of `kernel` on these buffers (the entry renders their references only)."""
    return Launch(kernel, (), tuple(Arg(r, (), "float32") for r in refs), sizes, 1, comment)


def test_entry_function_text():
    calls = [call("add_0", (Ref("input", 0), Ref("weight", 1), Ref("workspace", 2)), (Ref("size", 0),),
                  "%a = add(%x, %w)"),
             call("relu_1", (Ref("workspace", 2), Ref("output", 0)), ())]
    text = render_entry([*calls, Copy(Ref("output", 1), Ref("input", 0), (Ref("size", 0), 3), 4)])
    body = [line.strip() for line in text[text.index("int ember_model_run("):].splitlines()]
    assert body[0].startswith("int ember_model_run(void* const* inputs, void* const* outputs, char* workspace,")
    assert body[3:body.index("}") + 1] == [
        "const int ember_threads_before __attribute__((cleanup(ember_leave_threads))) = "
        "ember_enter_threads(num_threads);",
        "/* %a = add(%x, %w) */",
        "add_0(inputs[0], weights[1], (void*)(workspace + offsets[2]), sizes[0]);",
        "relu_1((void*)(workspace + offsets[2]), outputs[0]);",
        "__builtin_memcpy(outputs[1], inputs[0], (size_t)sizes[0] * (size_t)3 * 4);",
        "return 0;",
        "}",
    ]


def test_profiling_twin_times_every_call():
    calls = [call("add_0", (Ref("input", 0), Ref("output", 0)), (), "%a = add(%x, %x)"),
             call("add_0", (Ref("output", 0), Ref("output", 1)), ())]
    text = render_entry(calls)
    body = [line.strip() for line in text[text.index("int ember_model_profile("):].splitlines()]
    assert body[1].endswith("int num_threads, int64_t* ticks) {")
    assert body[4:] == ["ember_profile_tick(ticks, 0);",
                        "add_0(inputs[0], outputs[0]);", "ember_profile_tick(ticks, 1);",
                        "add_0(outputs[0], outputs[1]);", "ember_profile_tick(ticks, 2);",
                        "return 0;", "}"]
    # three clocks a boundary: wall, the thread's CPU, wall again (2 calls: 3 boundaries)
    assert "ticks[3 + j] = ember_profile_now(CLOCK_THREAD_CPUTIME_ID);" in text
    assert "ticks[6 + j] = ember_profile_now(CLOCK_MONOTONIC);" in text
    assert 'const char* const ember_model_profile_calls[] = {"add_0", "add_0", 0};' in text


def test_comments_cannot_end_early():
    text = render_entry([call("k", (), (), "a */ b\nc")])
    assert "/* a * / b c */" in text


def test_unknown_reference_kind():
    with pytest.raises(ValueError, match="reference kind 'stack' is not one of"):
        Ref("stack", 0)
