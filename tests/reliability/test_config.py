"""Configuration: every EMBER_* variable and every option keyword is checked where it is read. A
bad value is a ConfigError naming the variable (or keyword), never a signal, a bare ValueError or
a different meaning; thread counts are held to what the machine can run; flags that change
floating-point results are refused; a compiler that writes no library is a BuildError."""

from __future__ import annotations

import os
import shlex
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import config, te
from ember.cli import main
from ember.compiler import compile_graph
from ember.errors import BuildError, ConfigError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime import build
from ember.runtime.build import build_library
from ember.testing import random_array

ROOT = Path(__file__).resolve().parents[2]

# a child that compiles and runs tanh(x) on random inputs and checks it against NumPy
MODEL = """
import numpy as np
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
g = Graph("m")
x = g.add_input("x", TensorType((64, 96)))
g.set_outputs(add_op(g, "tanh", [x]))
cm = compile_graph(g)
a = np.random.default_rng().standard_normal((64, 96)).astype(np.float32) * 4
np.testing.assert_allclose(cm(a), np.tanh(a), rtol=1e-5, atol=1e-6)
print("ok", cm.num_threads)
"""


def tanh_graph() -> Graph:
    g = Graph("m")
    x = g.add_input("x", TensorType((8, 32)))
    g.set_outputs(add_op(g, "tanh", [x]))
    return g


def assert_config_error(run, variable: str, value: str, error: str = "ConfigError"):
    """The child exited (no signal) with `error` naming the variable and its value, in one line."""
    assert run.signal is None and run.returncode == 1, run
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ember.errors.{error}: ") and variable in last and repr(value) in last, run


# -- a bad variable, in a child ---------------------------------------------------------------
@pytest.mark.parametrize(("variable", "value"), [
    ("EMBER_NUM_THREADS", "abc"),
    ("EMBER_NUM_THREADS", "-3"),
    ("EMBER_NUM_THREADS", "2.5"),
    ("EMBER_CFLAGS", "'-O3"),
    ("EMBER_CFLAGS", "-O3 -ffast-math -fopenmp -shared -fPIC"),
    ("EMBER_CFLAGS", "-Ofast -fopenmp -shared -fPIC"),
    ("EMBER_CC", "'gcc"),
    ("EMBER_KEEP_SOURCE", "maybe"),
    ("EMBER_PRINT_LOWER", "2"),
    ("EMBER_PRINT_IR", "nope"),
    ("EMBER_DISABLE_PASSES", "cse,fuze"),
])
def test_bad_variable_is_a_config_error_naming_it(python, variable, value):
    assert_config_error(python(MODEL, env={variable: value}), variable, value)


def test_cache_dir_under_a_file_is_a_config_error(python, tmp_path):
    (tmp_path / "file").write_text("")
    value = str(tmp_path / "file" / "cache")
    assert_config_error(python(MODEL, env={"EMBER_CACHE_DIR": value}), "EMBER_CACHE_DIR", value)


def test_unwritable_cache_folder_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(build.os, "access", lambda path, mode: False)  # as root, chmod stops no one
    with pytest.raises(ConfigError, match="cannot write to the build cache folder .*EMBER_CACHE_DIR"):
        build_library("int f(void) { return 1; }\n")


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_cache_dir_is_the_default_never_the_current_folder(python, tmp_path, value):
    work, xdg = tmp_path / "work", tmp_path / "xdg"
    work.mkdir()
    run = python(MODEL, cwd=work, env={"EMBER_CACHE_DIR": value, "XDG_CACHE_HOME": str(xdg)})
    assert run.returncode == 0 and run.stdout.startswith("ok"), run
    assert not list(work.iterdir())
    assert list((xdg / "ember" / "kernels").rglob("*.so"))


# -- threads --------------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["EMBER_NUM_THREADS", "OMP_NUM_THREADS"])
def test_huge_thread_count_is_lowered_with_a_warning(python, variable):
    """100000 threads used to end in SIGSEGV inside libgomp (a 12.8 MB alloca on the stack)."""
    run = python(MODEL, env={variable: "100000"})
    assert run.returncode == 0, run
    assert run.stdout.split() == ["ok", str(config.max_threads())]
    assert f"RuntimeWarning: {variable}=100000: more threads than this machine can run" in run.stderr


def test_huge_thread_keyword_is_lowered(python):
    run = python("""
        import warnings
        import numpy as np
        from ember.compiler import compile_graph
        from ember.graph import Graph, TensorType
        from ember.ops.nodes import add_op
        from ember import config
        g = Graph("m")
        x = g.add_input("x", TensorType((64, 96)))
        g.set_outputs(add_op(g, "sigmoid", [x]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cm = compile_graph(g, num_threads=10**12)
            assert cm.num_threads == config.max_threads(), cm.num_threads
            cm.num_threads = 2**31 + 5  # past a C int
            assert cm.num_threads == config.max_threads(), cm.num_threads
        assert [str(w.message).split(":")[0] for w in caught] == ["num_threads=1000000000000", "num_threads=2147483653"]
        a = np.random.default_rng().standard_normal((64, 96)).astype(np.float32) * 8
        np.testing.assert_allclose(cm(a), 1 / (1 + np.exp(-a)), rtol=1e-5, atol=1e-6)
        print("ok")
    """)
    assert run.returncode == 0 and run.stdout == "ok\n", run


def test_max_threads_is_a_multiple_of_the_cores_with_a_cap():
    assert config.max_threads() == min(config.MAX_THREADS, config.THREADS_PER_CORE * os.cpu_count())


@pytest.mark.parametrize("bad", [-1, "4", 2.0, True, [4]])
def test_bad_num_threads_keyword_names_it(bad):
    g = tanh_graph()
    with pytest.raises(ConfigError, match=r"^num_threads=.* \(keyword argument\): "):
        compile_graph(g, num_threads=bad)


def test_num_threads_checked_by_load_and_the_model(tmp_path):
    g = tanh_graph()
    cm = compile_graph(g, num_threads=1)
    cm.save(tmp_path / "m.ember")
    with pytest.raises(ConfigError, match=r"^num_threads=-2 \(keyword argument\): negative"):
        ember.load(tmp_path / "m.ember", num_threads=-2)
    with pytest.raises(ConfigError, match=r"^num_threads='x' \(keyword argument\)"):
        cm.num_threads = "x"
    assert cm.num_threads == 1  # unchanged by the refused value
    loaded = ember.load(tmp_path / "m.ember", num_threads=2)
    x = random_array((8, 32))
    assert loaded.num_threads == 2
    np.testing.assert_allclose(loaded(x), np.tanh(x), rtol=1e-5, atol=1e-6)


# -- compiler and flags ---------------------------------------------------------------------
def test_fast_math_flags_are_refused_by_name(monkeypatch):
    for flag in config.FAST_MATH_FLAGS:
        monkeypatch.setenv("EMBER_CFLAGS", f"-O2 {flag} -shared -fPIC")
        with pytest.raises(ConfigError, match=rf"^EMBER_CFLAGS='-O2 {flag} -shared -fPIC': {flag} change"):
            config.get("cflags")


@pytest.mark.parametrize("flags", ["-O3 -ffast-math -shared -fPIC", ["-O3", "-shared", "-fPIC", "-ffinite-math-only"]])
def test_fast_math_keyword_is_refused_before_compiling(flags):
    with pytest.raises(ConfigError, match=r"^cflags=.* \(keyword argument\): -f.* change\(s\) floating-point results"):
        compile_graph(tanh_graph(), cflags=flags)
    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] * 2, name="B")
    with pytest.raises(ConfigError, match=r"^cflags="):
        ember.build(te.create_schedule(b.op), [a, b], cflags=flags)


def test_harmless_float_flags_are_allowed(monkeypatch):
    """-fno-math-errno and -fno-trapping-math change no value: ember reads neither errno nor traps."""
    flags = config.OPTIONS["cflags"].default + " -fno-math-errno -fno-trapping-math"
    monkeypatch.setenv("EMBER_CFLAGS", flags)
    assert config.get("cflags") == flags
    cm = compile_graph(tanh_graph())
    x = random_array((8, 32)) * 8
    np.testing.assert_allclose(cm(x), np.tanh(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cc", ["true", "echo"])
def test_compiler_that_writes_no_library_is_a_build_error(python, cc):
    run = python(MODEL, env={"EMBER_CC": cc})
    assert run.signal is None and run.returncode == 1, run
    last = run.stderr.strip().splitlines()
    assert any(line.startswith(f"ember.errors.BuildError: the C compiler '{cc}' (EMBER_CC, or cc=) exited 0 but "
                               "produced no library") for line in last), run
    assert "FileNotFoundError" not in run.stderr


def test_missing_compiler_names_the_variable(python):
    run = python(MODEL, env={"EMBER_CC": "/nonexistent/bin/cc"})
    assert_config_error(run, "EMBER_CC", "/nonexistent/bin/cc", error="BuildError")


def test_compiler_keyword_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"^cc='' \(keyword argument\): names no program"):
        compile_graph(tanh_graph(), cc="")
    with pytest.raises(BuildError, match="exited 0 but produced no library"):
        build_library("int f(void) { return 1; }\n", cc="true")


def test_compiler_command_is_split_like_a_shell(monkeypatch):
    monkeypatch.setenv("EMBER_CC", "env LC_ALL=C cc")
    path = build_library("int f(void) { return 1; }\n")
    assert path.read_bytes()[:4] == b"\x7fELF"


# -- booleans -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [*((w, True) for w in [*config.TRUE, "TRUE", " Yes "]),
                                             *((w, False) for w in [*config.FALSE, "Off", "FALSE"])])
def test_boolean_spellings(monkeypatch, text, value):
    monkeypatch.setenv("EMBER_KEEP_SOURCE", text)
    assert config.get("keep_source") is value


# -- any string: a valid value or a ConfigError naming the variable ------------------------------
def _valid(name: str, value) -> bool:
    match name:
        case "num_threads":
            return isinstance(value, int) and 0 <= value <= config.max_threads()
        case "max_specializations":
            return isinstance(value, int) and value >= 1
        case "cache_limit":
            return isinstance(value, int) and value >= 0
        case ("debug" | "print_lower" | "keep_source" | "checked" | "interpret" | "triton_debug" | "fast_call"
              | "lowered_cache" | "cuda_graphs" | "model_cache" | "record_trace" | "tile_mma"
              | "tile_fragment_stores"):
            return isinstance(value, bool)
        case "cc":
            return bool(shlex.split(value))
        case "cflags":
            return not set(shlex.split(value)) & set(config.FAST_MATH_FLAGS)
        case "cache_dir":
            return Path(value).is_absolute() and not Path(value).is_file()
        case _:
            return isinstance(value, tuple) and set(value) <= set(config.GRAPH_PASSES)


TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)
VARIABLE_TEXT = st.one_of(TEXT, st.sampled_from(["0", "7", "-1", "99999999999999999999", "all", "cse, dce", "'",
                                                 "-ffast-math", "~", "1e3", " on "]))


@pytest.mark.parametrize("name", list(config.OPTIONS))
@settings(max_examples=60, deadline=None)
@given(text=VARIABLE_TEXT)
def test_any_variable_value_is_valid_or_a_config_error(name, text):
    opt = config.OPTIONS[name]
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mp.setenv(opt.env, text)
        try:
            value = config.get(name)
        except ConfigError as e:
            assert str(e).startswith(f"{opt.env}=")
        else:
            assert _valid(name, value), value


KEYWORD_VALUES = st.one_of(TEXT, st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.lists(TEXT, max_size=4),
                           st.sampled_from(["-O2 -Ofast", ["-O2", "-ffast-math"], "all", ["cse", "fuse"], 3]))


@pytest.mark.parametrize(("name", "keyword"), [("num_threads", "num_threads"), ("cc", "cc"), ("cflags", "cflags"),
                                               ("print_ir", "print_ir"), ("disable_passes", "disabled_passes"),
                                               ("max_specializations", "max_specializations")])
@settings(max_examples=60, deadline=None)
@given(value=KEYWORD_VALUES)
def test_any_keyword_value_is_valid_or_a_config_error(name, keyword, value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            checked = config.resolve(name, value, keyword)
        except ConfigError as e:
            assert str(e).startswith(f"{keyword}=")
        else:
            assert _valid(name, checked), checked


# -- the options, documented ----------------------------------------------------------------
def test_readme_and_doctor_list_every_option(capsys, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    assert all(opt.env in readme for opt in config.OPTIONS.values())
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert all(f"{opt.env}=" in out for opt in config.OPTIONS.values())
    monkeypatch.setenv("EMBER_NUM_THREADS", "many")
    assert main(["doctor"]) == 1
    assert "ERROR EMBER_NUM_THREADS='many': not an integer" in capsys.readouterr().out
