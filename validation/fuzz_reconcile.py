#!/usr/bin/python3
"""Property-based fuzzing of avtrain-reconcile (and plot_traces.py) on damaged trace directories.

usage: fuzz_reconcile.py        (exit 0 when every generated input ends well, 1 otherwise)
  AVTRAIN_FUZZ_RECONCILE_EXAMPLES=N   N generated inputs, random (default: a fixed set of 120, for CI)
  AVTRAIN_FUZZ_RECONCILE_PLOTS=M      M more through plot_traces.py as well (default: N / 30)

Every input must end in PASS (exit 0), FAIL (exit 1) or a refusal (exit 2) of one non-empty line on
stderr and nothing on stdout; a verdict's report ends with its verdict line and leaves stderr empty,
its --json document is strict JSON; never a traceback, a warning or a hang (60 s). Each input starts
from valid run directories written by test_reconcile.py's helpers (the same runs its unit tests
judge) and damages them with python3-hypothesis: cells, columns and rows of trace.csv, layers.csv
and ranks.csv, their bytes (truncated, a BOM, bytes that are not UTF-8, CRLF), run.json's fields
(wrong types, missing keys, deep nesting, NaN), missing files, run lengths that differ, and the
options (--steps, --window, --first-steps, --band-factor, --tol, --null, --segment-limit, --json)
at the ends of their ranges. The tools run in this process through their main() (the code path of
the command, about three times faster than a process each: numpy's import is most of a command's
time); a failure prints the input that found it, shrunk.
"""
import contextlib
import csv
import io
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
import zlib

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:
    print("fuzz_reconcile.py: needs python3-hypothesis (jobscripts/install-deps.sh --tests)", file=sys.stderr)
    sys.exit(1)
# hypothesis keeps a cache (its table of Unicode characters) under .hypothesis/ of the current folder:
# under the temporary folder instead, not in the source tree nor the build tree
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "avtrain-fuzz-reconcile-hypothesis"))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reconcile as valid_runs  # noqa: E402  (the unit tests' writers of valid run directories)

reconcile = valid_runs.load_reconcile()
try:
    import plot_traces  # noqa: E402
except SystemExit:  # no matplotlib (its exit 3): the reconcile tool is fuzzed alone
    plot_traces = None

HANG_SECONDS = 60
CI_EXAMPLES = 120  # about 25 s on the 2 cores of a loaded machine (docs/fuzzing.md)
FILES = ("run.json", "trace.csv", "layers.csv", "ranks.csv")
CSV_FILES = ("trace.csv", "layers.csv", "ranks.csv")

# ------------------------------------------------------------------ valid run directories

KINDS = ("fp32", "bf16", "fp16_skipped", "field", "fp8", "ranks")
LENGTHS = (1, 2, 5, 12, 24)
_templates = {}


def _noisy(series, seed):
    """A copy of `series` whose loss, grad norm and layer norms wander a few % (an AMP-like run)."""
    out = []
    for r in series:
        k = 1 + 0.02 * math.sin(seed + r["step"])
        out.append(dict(r, loss=r["loss"] * k, grad_norm=r["grad_norm"] / k,
                        layers={n: v * (1 + 0.01 * math.cos(seed * i + r["step"]))
                                for i, (n, v) in enumerate(r["layers"].items())}))
    return out


def _write_template(path, kind, n):
    series = valid_runs.base_series()[:n]
    if kind == "fp32":
        valid_runs.write_run(path, series)
    elif kind == "bf16":
        valid_runs.write_run(path, _noisy(series, 1), mode="bf16")
    elif kind == "fp16_skipped":  # skipped steps as fp16 writes them: a non-finite loss, the scale halved
        scale, skipped = 65536.0, []
        for r in _noisy(series, 2):
            if r["step"] % 4 == 3:
                r = dict(r, skipped=1, loss="-nan", grad_norm="inf", loss_scale=scale,
                         layers=dict(r["layers"], **{"head.cls": "inf"}),
                         nonfinite=dict(r["nonfinite"], **{"head.cls": 3}))
                scale /= 2
            else:
                r = dict(r, loss_scale=scale)
            skipped.append(r)
        valid_runs.write_run(path, skipped, mode="fp16")
    elif kind == "field":
        valid_runs.write_run(path, series, field={"val_top5": 0.9, "val_map": 0.6, "val_auc": 0.9,
                                                  "val_dprime": 1.8})
    elif kind == "fp8":
        valid_runs.write_run(path, _noisy(series, 3))
        valid_runs.add_fp8_columns(path, frozen="blocks.1.mlp.fc1" if n > 4 else None)
    elif kind == "ranks":
        valid_runs.write_run(path, series, mode="bf16",
                             ranks=[(s, r, 512.0 if (s, r) == (3, 1) else 1024.0) for s in range(n) for r in range(2)])


def template(kind, n):
    """{file name: bytes} of a valid run directory of `kind` with `n` steps."""
    key = (kind, n)
    if key not in _templates:
        with tempfile.TemporaryDirectory(prefix="fuzz_reconcile.") as tmp:
            path = os.path.join(tmp, "run")
            _write_template(path, kind, n)
            files = {}
            for name in FILES:
                p = os.path.join(path, name)
                if os.path.isfile(p):
                    with open(p, "rb") as f:
                        files[name] = f.read()
            _templates[key] = files
    return dict(_templates[key])


# ------------------------------------------------------------------ the damage

NASTY_CELLS = ("", " ", "nan", "-nan", "NaN", "inf", "-inf", "+inf", "Infinity", "1e309", "-1e309", "1e308",
               "-1e308", "4e-320", "1e-400", "0", "-0", "-1", "0.5", "1.5", "3", "7", "1e18", "9.3e18", "1e19",
               "18446744073709551616", "9" * 400, "abc", "0x10", "1_0", "\u0661", "\u00b2", "  7  ", "\t1", '"',
               "1,2", "a\nb", "a\rb", "\x00", "\x85", "\u2028", "\ufeff1", "\u00e9", "-", ".", "audio.conv",
               "head.cls", "blocks.0.ln1", "blocks.9.x")
# numbers that every reader takes: the analysis past the readers meets them
NUMBERS = ("nan", "-nan", "inf", "-inf", "0", "-0", "1e308", "-1e308", "4e-320", "1e-300", "-1", "1", "2", "1e18",
           "9007199254740992", "9007199254740993", "0.5")
cell = st.one_of(st.sampled_from(NASTY_CELLS), st.floats().map(repr), st.integers(-2 ** 70, 2 ** 70).map(str),
                 st.text(max_size=6))
number = st.one_of(st.sampled_from(NUMBERS), st.floats().map(repr))
index = st.integers(0, 10 ** 6)  # taken modulo the size of what it picks from
COLUMNS = tuple(dict.fromkeys(reconcile.TRACE_COLUMNS + reconcile.LAYER_COLUMNS + reconcile.RANK_COLUMNS
                              + ("val_loss", "val_acc", "val_map", "val_dprime", "fp8_x_amax", "fp8_dy_scale",
                                 "fp8_w_underflow", "fp8_x_saturated")))
column = st.one_of(st.sampled_from(COLUMNS), index)  # a column the tool reads, or any
column_names = st.one_of(st.sampled_from(COLUMNS + ("", "Step", " step", "step\n", "a\nb", "x\ry", "\x00")),
                         st.text(max_size=6))
csv_file = st.sampled_from(CSV_FILES)
CSV_OPS = ("cell", "column_value", "drop_column", "rename_column", "extra_column", "drop_row", "duplicate_row",
           "swap_rows", "reverse_rows", "keep_rows", "short_row", "long_row", "blank_line", "shift_steps",
           "scale_steps")

csv_damage = st.one_of(
    st.tuples(st.just("cell"), csv_file, index, column, cell),
    st.tuples(st.just("cell"), csv_file, index, column, number),
    st.tuples(st.just("column_value"), csv_file, column, cell),          # a whole column set to one value
    st.tuples(st.just("column_value"), csv_file, column, number),
    st.tuples(st.just("drop_column"), csv_file, column),
    st.tuples(st.just("rename_column"), csv_file, column, column_names),
    st.tuples(st.just("extra_column"), csv_file, column_names, cell),
    st.tuples(st.just("drop_row"), csv_file, index),
    st.tuples(st.just("duplicate_row"), csv_file, index),
    st.tuples(st.just("swap_rows"), csv_file, index, index),
    st.tuples(st.just("reverse_rows"), csv_file),
    st.tuples(st.just("keep_rows"), csv_file, st.integers(0, 30)),
    st.tuples(st.just("short_row"), csv_file, index, st.integers(0, 20)),
    st.tuples(st.just("long_row"), csv_file, index, cell),
    st.tuples(st.just("blank_line"), csv_file, index),
    st.tuples(st.just("blank_line"), csv_file, st.just(0)),  # right after the header: rows and lines part
    # the whole numbers (a step, a count) broken
    st.tuples(st.just("cell"), csv_file, st.integers(0, 3), st.sampled_from(("step", "skipped", "nonfinite", "rank")),
              st.sampled_from(("-1", "0.5", "nan", "inf", "-0", "1e19", "9007199254740993", "x"))),
    st.tuples(st.just("shift_steps"), csv_file, st.sampled_from((-1, 1, 3, 1000, 2 ** 53, 2 ** 63))),
    st.tuples(st.just("scale_steps"), csv_file, st.sampled_from((0, 2, 3))),
)
byte_damage = st.one_of(
    st.tuples(st.just("truncate"), st.sampled_from(FILES), index),
    st.tuples(st.just("insert_bytes"), st.sampled_from(FILES), index,
              st.one_of(st.sampled_from((b"\xff", b"\xc3", b"\x00", b"\r", b"\n", b'"', b",", b"\xef\xbb\xbf")),
                        st.binary(max_size=4))),
    st.tuples(st.just("bom"), st.sampled_from(FILES)),
    st.tuples(st.just("crlf"), st.sampled_from(FILES)),
    st.tuples(st.just("latin1"), st.sampled_from(FILES)),  # é as one byte
    st.tuples(st.just("empty"), st.sampled_from(FILES)),
    st.tuples(st.just("delete"), st.sampled_from(FILES)),
    st.tuples(st.just("directory"), st.sampled_from(FILES)),  # a folder where the file should be
)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(), st.text(max_size=6),
              st.sampled_from(("fp32", "bf16", "fp16", "fp8", "FP16 ", "tf32", "max", "most_recent", "uniform", "1",
                               "blocks.1.mlp.fc1", 0, 1, -1, 2 ** 63, 1e300, -5000, 5000))),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
JSON_EDGES = (math.inf, -math.inf, math.nan, 1e300, -1e300, 2 ** 64, -2 ** 64, 0, -1, 0.5, "fp\n16", "a\u2028b", "",
              [], {}, None, True, "inf", "nan", "1e400")
# The fields the tool reads (the comparison, the tolerances, the global batch, the FP8 recipe), then others.
READ_PATHS = tuple(("config", k) for k in (
    "precision.mode", "train.micro_batch", "train.micro_batches", "precision.fp8_history", "precision.fp8_margin",
    "precision.fp8_amax", "debug.fp8_freeze_scale", "model.width", "model.task", "augment.mixup",
    "augment.time_masks", "augment.time_mask_width", "data.sampling")) + (
    ("layout", "dp"), ("seed",), ("config",), ("data",), ("layout",), ("data", "shards"), ("data", "dir"))
OTHER_PATHS = (("config", "train.seed"), ("layout", "pp"), ("data", "video_shape"), ("model",), ("build",),
               ("deck",), ("config", "augment.flip"), ("config", "augment.crop_scale"))
FP8_PATHS = (("config", "precision.fp8_history"), ("config", "precision.fp8_margin"), ("config", "precision.fp8_amax"))
read_path = st.sampled_from(READ_PATHS)
# the FP8 recipe that CAND's scales are replayed by, at and past the ends of avtrain's ranges
fp8_damage = st.tuples(st.just("json_set"), st.sampled_from(FP8_PATHS),
                       st.sampled_from((math.inf, -math.inf, math.nan, -3, 0, 1, 18, 19, -5000, 1e300, "x", None)))
json_path = st.one_of(read_path, st.sampled_from(OTHER_PATHS))
json_damage = st.one_of(
    st.tuples(st.just("json_set"), read_path, st.sampled_from(JSON_EDGES)),
    st.tuples(st.just("json_set"), read_path, st.sampled_from(JSON_EDGES)),  # twice: the likeliest damage
    fp8_damage, fp8_damage,  # twice: a run with FP8 statistics is one kind in six
    st.tuples(st.just("json_set"), json_path, json_values),
    st.tuples(st.just("json_delete"), json_path),
    st.tuples(st.just("json_top"), json_values),                      # the whole document another value
    st.tuples(st.just("json_deep"), json_path, st.sampled_from((50, 500, 900, 990, 1100, 5000, 100000)),
              st.sampled_from(("[", '{"a":'))),
    st.tuples(st.just("json_text"), st.text(max_size=20)),
)


def _kept(x):
    return x


# A third of the damage each to the CSV files' cells, columns and rows, to the bytes of any file, and to
# run.json (hypothesis would otherwise flatten the three into one choice among all their kinds, and the
# fields of run.json, a few of those kinds, would seldom be hit).
damage = st.one_of(csv_damage.map(_kept), byte_damage.map(_kept), json_damage.map(_kept))
# half the runs undamaged, so that the analysis past the readers is reached often
damages = st.one_of(st.just([]), st.lists(damage, min_size=1, max_size=3))


@st.composite
def run_spec(draw):
    return {"kind": draw(st.sampled_from(KINDS)), "steps": draw(st.sampled_from(LENGTHS)), "damage": draw(damages)}


def _read_csv_text(data):
    return list(csv.reader(io.StringIO(data.decode("utf-8", "surrogateescape"), newline="")))


def _write_csv_text(rows):
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8", "surrogateescape")


def _damage_csv(rows, op, args):
    """One damage of a CSV file's rows (header first), in place."""
    header, body = (rows[0], rows[1:]) if rows else ([], [])
    col = lambda c: (header.index(c) if c in header else zlib.crc32(c.encode()) % len(header)) if isinstance(c, str) \
        else c % len(header)  # a column by name (another where it is absent) or by position
    if op == "cell" and body and header:
        r = body[args[0] % len(body)]
        j = col(args[1])
        if j < len(r):
            r[j] = args[2]
    elif op == "column_value" and header:
        j = col(args[0])
        for r in body:
            if j < len(r):
                r[j] = args[1]
    elif op == "drop_column" and header:
        j = col(args[0])
        for r in rows:
            if j < len(r):
                del r[j]
    elif op == "rename_column" and header:
        header[col(args[0])] = args[1]
    elif op == "extra_column":
        for i, r in enumerate(rows):
            r.append(args[0] if i == 0 else args[1])
    elif op == "drop_row" and body:
        del body[args[0] % len(body)]
    elif op == "duplicate_row" and body:
        i = args[0] % len(body)
        body.insert(i, list(body[i]))
    elif op == "swap_rows" and body:
        i, k = args[0] % len(body), args[1] % len(body)
        body[i], body[k] = body[k], body[i]
    elif op == "reverse_rows":
        body.reverse()
    elif op == "keep_rows":
        del body[args[0]:]
    elif op == "short_row" and body:
        r = body[args[0] % len(body)]
        del r[min(args[1], len(r)):]
    elif op == "long_row" and body:
        body[args[0] % len(body)].append(args[1])
    elif op == "blank_line" and rows:
        body.insert(args[0] % (len(body) + 1), [])
    elif op in ("shift_steps", "scale_steps") and "step" in header:
        j = header.index("step")
        for r in body:
            try:
                s = int(r[j])
            except (ValueError, IndexError):
                continue
            r[j] = str(s + args[0] if op == "shift_steps" else s * args[0])
    rows[:] = [header] + body if rows else rows


def _json_edit(doc, path, op, value=None):
    """Sets or deletes doc[path...] where the parents are objects; builds the missing parents."""
    node = doc
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    if not isinstance(node, dict):
        return
    if op == "delete":
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def damage_run(files, damage_list):
    """Applies each damage to {file name: bytes} (None: absent; "dir": a folder in its place)."""
    for d in damage_list:
        op, args = d[0], d[1:]
        if op in CSV_OPS:
            name, args = args[0], args[1:]
            if not isinstance(files.get(name), bytes):
                continue
            try:
                rows = _read_csv_text(files[name])
            except csv.Error:
                continue  # damaged beyond what csv can split: the bytes stay as they are
            _damage_csv(rows, op, args)
            files[name] = _write_csv_text(rows)
        elif op.startswith("json_"):
            data = files.get("run.json")
            if op == "json_text":
                files["run.json"] = args[0].encode("utf-8", "surrogatepass")
                continue
            if not isinstance(data, bytes):
                continue
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError):  # damaged already: its bytes stay as they are
                continue
            if op == "json_top":
                doc = args[0]
            elif op == "json_set":
                _json_edit(doc, args[0], "set", args[1])
            elif op == "json_delete":
                _json_edit(doc, args[0], "delete")
            elif op == "json_deep":  # a marker put where the nesting goes, replaced in the text
                marker = "\u0000deep\u0000"
                _json_edit(doc, args[0], "set", marker)
                doc = doc if isinstance(doc, dict) else marker
            text = json.dumps(doc)  # NaN and Infinity as Python writes them, which Python's json reads
            if op == "json_deep":
                _, depth, opener = args
                closer = "]" if opener == "[" else "}"
                text = text.replace(json.dumps(marker), opener * depth + "1" + closer * depth, 1)
            files["run.json"] = text.encode("utf-8", "surrogatepass")
        else:
            name = args[0]
            data = files.get(name)
            if op == "delete":
                files[name] = None
            elif op == "directory":
                files[name] = "dir"
            elif op == "empty":
                files[name] = b""
            elif not isinstance(data, bytes):
                continue
            elif op == "truncate":
                files[name] = data[:args[1] % (len(data) + 1)]
            elif op == "insert_bytes":
                i = args[1] % (len(data) + 1)
                files[name] = data[:i] + args[2] + data[i:]
            elif op == "bom":
                files[name] = b"\xef\xbb\xbf" + data
            elif op == "crlf":
                files[name] = data.replace(b"\n", b"\r\n")
            elif op == "latin1":
                files[name] = data.replace(b"e", b"\xe9", 1)
    return files


def write_dir(path, files):
    os.makedirs(path)
    for name, data in files.items():
        p = os.path.join(path, name)
        if data == "dir":
            os.makedirs(p)
        elif data is not None:
            with open(p, "wb") as f:
                f.write(data)


# ------------------------------------------------------------------ the options

def _metric_tol(metrics):
    size = st.sampled_from((0.0, 1e-300, 1e-6, 0.5, 1.0, 1e6, 1e308))
    return st.tuples(st.sampled_from(metrics), size, size).map(lambda t: f"--tol={t[0]}={t[1]!r},{t[2]!r}")


options = st.lists(st.one_of(
    st.sampled_from((1, 2, 3, 5, 10, 20, 1000)).map(lambda n: ("--steps", str(n))),
    st.sampled_from((1, 2, 3, 10, 50, 1000)).map(lambda n: ("--window", str(n))),
    st.sampled_from((0, 1, 3, 10, 1000)).map(lambda n: ("--first-steps", str(n))),
    st.sampled_from((0.0, 1e-300, 0.5, 5.0, 1e300)).map(lambda x: ("--band-factor", repr(x))),
    st.sampled_from((0.0, 1e-300, 0.5, 4.0, 1e300)).map(lambda x: ("--segment-limit", repr(x))),
    _metric_tol(reconcile.METRICS).map(lambda t: (t,)),
), max_size=3)


@st.composite
def case(draw):
    """Runs (the BASE runs then CAND), an optional --null pair, options, and where --json goes."""
    return {"runs": draw(st.lists(run_spec(), min_size=2, max_size=3)),
            "null": draw(st.one_of(st.none(), st.lists(run_spec(), min_size=2, max_size=2))),
            "options": draw(options),
            # --json: mostly none or a file; now and then where it cannot be written (a refusal)
            "json": draw(st.sampled_from((None, None, None, "out.json", "out.json", "missing-folder/out.json",
                                          "run0")))}


# ------------------------------------------------------------------ running the tools

class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no answer within {HANG_SECONDS} s")


def call(main, argv):
    """(exit code, stdout, stderr) of main(argv) in this process, warnings shown as the command shows them."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def materialize(c, tmp):
    """Writes the case's run directories under tmp; returns the tool's arguments without --json."""
    dirs = []
    for i, spec in enumerate(c["runs"] + (c["null"] or [])):
        path = os.path.join(tmp, f"run{i}")
        write_dir(path, damage_run(template(spec["kind"], spec["steps"]), spec["damage"]))
        dirs.append(path)
    argv = dirs[:len(c["runs"])]
    if c["null"]:
        argv += ["--null", ",".join(dirs[len(c["runs"]):])]
    for opt in c["options"]:
        argv += list(opt)
    return argv


def check_outcome(tool, rc, out, err, json_path=None):
    """The property: PASS, FAIL or a one-line refusal; raises AssertionError naming what broke it."""
    assert rc in (0, 1, 2), f"{tool}: exit {rc!r}\n{out[-2000:]}{err}"
    assert "Traceback" not in out + err, f"{tool}: a traceback\n{err}"
    if rc == 2:
        assert err.endswith("\n") and len(err.splitlines()) == 1 and err.strip(), \
            f"{tool}: a refusal that is not one non-empty line: {err!r}"
        assert out == "", f"{tool}: a refusal with a report on stdout\n{out[-2000:]}"
        return
    assert err == "", f"{tool}: exit {rc} with something on stderr: {err!r}"
    if tool == "avtrain-reconcile":
        last = out.rstrip("\n").rsplit("\n", 1)[-1]
        assert last.startswith("verdict: PASS" if rc == 0 else "verdict: FAIL ("), \
            f"{tool}: exit {rc} and a report that ends {last!r}"
        if json_path is not None and os.path.basename(json_path) == "out.json":
            def strict(token):
                raise ValueError(f"{token} in the --json document: not JSON")
            with open(json_path) as f:
                doc = json.load(f, parse_constant=strict)
            assert doc["verdict"] == ("PASS" if rc == 0 else "FAIL"), f"{tool}: --json says {doc['verdict']}"


outcomes = {"reconcile": {0: 0, 1: 0, 2: 0}, "plot": {0: 0, 2: 0}}


def run_case(c, plot=False):
    with tempfile.TemporaryDirectory(prefix="fuzz_reconcile.") as tmp:
        argv = materialize(c, tmp)
        json_path = os.path.join(tmp, c["json"]) if c["json"] else None
        rc, out, err = call(reconcile.main, argv + (["--json", json_path] if json_path else []))
        check_outcome("avtrain-reconcile", rc, out, err, json_path)
        left = [n for n in os.listdir(tmp) if n.endswith(".tmp")]
        assert not left, f"avtrain-reconcile: exit {rc} and {left} left behind"
        outcomes["reconcile"][rc] += 1
        if plot:
            png = os.path.join(tmp, "plot.png")
            rc, out, err = call(plot_traces.main, argv + ["--out", png])
            assert rc in (0, 2), f"plot_traces.py: exit {rc!r}\n{err}"
            check_outcome("plot_traces.py", rc, out, err)
            assert rc == 2 or os.path.getsize(png) > 0, "plot_traces.py: exit 0 without its PNG"
            outcomes["plot"][rc] += 1


def fuzz_settings(examples, derandomize):
    return settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def count_from_env(name, default):
    v = os.environ.get(name)
    if v is None:
        return default
    if not v.isdigit() or (name.endswith("EXAMPLES") and int(v) == 0):
        sys.exit(f"fuzz_reconcile.py: {name}={v!r} is not a count of inputs")
    return int(v)


def main():
    asked = "AVTRAIN_FUZZ_RECONCILE_EXAMPLES" in os.environ
    examples = count_from_env("AVTRAIN_FUZZ_RECONCILE_EXAMPLES", CI_EXAMPLES)
    plots = count_from_env("AVTRAIN_FUZZ_RECONCILE_PLOTS", max(examples // 30, 1))
    derandomize = not asked  # CI: the same inputs every time; on demand: new ones
    if plot_traces is None:
        plots = 0
        print("fuzz_reconcile: no matplotlib: plot_traces.py is not fuzzed")

    @fuzz_settings(examples, derandomize)
    @given(case())
    def reconcile_never_tracebacks(c):
        run_case(c)

    @fuzz_settings(max(plots, 1), derandomize)
    @given(case())
    def plot_never_tracebacks(c):
        run_case(c, plot=True)

    start = time.monotonic()
    failed = False
    for test, n in ((reconcile_never_tracebacks, examples), (plot_never_tracebacks, plots)):
        if n == 0:
            continue
        try:
            test()
        except Exception:  # hypothesis has printed the shrunk input; the traceback says where
            traceback.print_exc()
            failed = True
    r, p = outcomes["reconcile"], outcomes["plot"]
    print(f"fuzz_reconcile: {sum(r.values())} inputs through avtrain-reconcile (PASS {r[0]}, FAIL {r[1]}, "
          f"refused {r[2]}), {sum(p.values())} also through plot_traces.py (plotted {p[0]}, refused {p[2]}), "
          f"{'fixed set' if derandomize else 'random'}, {time.monotonic() - start:.1f} s")
    # A generator that stopped reaching the verdicts would check the readers alone
    if not failed and examples >= 100 and min(r.values()) == 0:
        print("fuzz_reconcile: some outcome never happened: the generator no longer reaches every part of the tool")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
