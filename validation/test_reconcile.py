#!/usr/bin/python3
"""Self-checking test of avtrain-reconcile and plot_traces.py on synthetic trace directories.

usage: test_reconcile.py        (exit 0 when every check passes, 1 otherwise)

Writes run.json / trace.csv / layers.csv (and ranks.csv) shaped like a real CI-deck run into a
temporary directory, runs both tools, and checks exit codes, messages, the report, the --json
document and the PNG. A few cases run the scripts as commands; the rest call avtrain-reconcile's
main() in this process, which keeps the test to a few seconds.
"""
import contextlib
import copy
import fnmatch
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from concurrent.futures import ThreadPoolExecutor
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

HERE = os.path.dirname(os.path.abspath(__file__))
RECONCILE = os.path.join(HERE, "avtrain-reconcile")
PLOT = os.path.join(HERE, "plot_traces.py")
PY = "/usr/bin/python3"

STEPS = 60
DEPTH = 2
LAYERS = (["audio.conv", "audio.bn", "video.patch", "embed"]
          + [f"blocks.{i}.{m}" for i in range(DEPTH)
             for m in ("ln1", "attn.qkv", "attn.proj", "ln2", "mlp.fc1", "mlp.fc2")]
          + ["head.ln", "head.cls"])

RUN_JSON = {
    "build": {"blas": "OpenBLAS (OpenMP)", "build_type": "Release", "compiler": "GNU 12.2.0",
              "git_commit": "21618523752e", "version": "0.1.0"},
    "config": {
        "data.dir": "/data/av", "data.prefetch_steps": 2, "data.val_fraction": 0.125,
        "model.audio_hop": 128, "model.audio_window": 256, "model.depth": DEPTH, "model.heads": 4,
        "model.init_std": 0.02, "model.mel_bins": 32, "model.mlp_ratio": 2,
        "model.nce_temperature": 0.1, "model.nce_weight": 0.1, "model.patch": 8,
        "model.tubelet_frames": 2, "model.width": 64,
        "optim.beta1": 0.9, "optim.beta2": 0.95, "optim.clip_norm": 1.0, "optim.eps": 1e-08,
        "optim.lr": 0.003, "optim.min_lr": 0.0003, "optim.warmup_steps": 5,
        "optim.weight_decay": 0.05,
        "train.eval_interval": 20, "train.log_interval": 10, "train.micro_batch": 16,
        "train.micro_batches": 2, "train.out": "/runs/x", "train.seed": 7, "train.steps": STEPS,
        "train.threads": 2,
    },
    "data": {
        "audio_samples": 8000, "audio_type": "int16", "dir": "/data/av", "fps": 8.0,
        "num_classes": 16, "sample_rate": 8000,
        "shards": [{"bytes": 4268721, "name": "shard-00000.h5", "samples": 256},
                   {"bytes": 4268564, "name": "shard-00001.h5", "samples": 256}],
        "steps_per_epoch": 14, "total_samples": 512, "train_samples": 448, "val_samples": 64,
        "video_shape": [8, 32, 32, 1],
    },
    "deck": "inputs/ci.ini",
    "layout": {"device": "cpu", "dp": 1, "pp": 1, "threads": 2, "world_size": 1},
    "model": {"audio_tokens": 31, "parameters": 89936, "tokens": 95, "video_tokens": 64},
    "seed": 7,
}

TRACE_HEADER = ("step,epoch,loss,grad_norm,loss_scale,skipped,lr,step_ms,data_wait_ms,comm_ms,"
                "samples_per_s,mem_peak_mb,val_loss,val_acc")
LAYERS_HEADER = "step,layer,grad_norm,param_norm,act_absmax,grad_underflow_frac,nonfinite"


def base_series():
    """Deterministic per-step values of a plausible run."""
    rnd = random.Random(1)
    steps = []
    for s in range(STEPS):
        loss = 0.3 + 2.8 * math.exp(-s / 15) * (1 + 0.05 * rnd.uniform(-1, 1))
        gnorm = 1.5 + 2.5 * math.exp(-s / 10) * (1 + 0.2 * rnd.uniform(-1, 1))
        layer = {name: 0.01 * (1 + i) * (1 + 0.1 * rnd.uniform(-1, 1)) for i, name in enumerate(LAYERS)}
        steps.append({"step": s, "loss": loss, "grad_norm": gnorm, "loss_scale": 1.0, "skipped": 0,
                      "layers": layer, "underflow": {n: 0.001 for n in LAYERS},
                      "nonfinite": {n: 0 for n in LAYERS}})
    return steps


FIELD_COLUMNS = ("val_top5", "val_map", "val_auc", "val_dprime")  # the metrics of the field (docs/metrics.md)


def write_run(path, series, meta=None, mode=None, ranks=None, field=None):
    """field: {column: value at every evaluation} of the metrics of the field, or None for a trace.csv
    from before those columns."""
    os.makedirs(path)
    meta = copy.deepcopy(meta or RUN_JSON)
    if mode is not None:
        meta["config"]["precision.mode"] = mode
    with open(os.path.join(path, "run.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
    with open(os.path.join(path, "trace.csv"), "w") as f:
        f.write(TRACE_HEADER + ("," + ",".join(FIELD_COLUMNS) if field else "") + "\n")
        for r in series:
            val = ("1.5,0.5" if r["step"] % 20 == 19 else ",")
            if field:
                val += "," + ",".join(fmt(field[k]) if r["step"] % 20 == 19 else "" for k in FIELD_COLUMNS)
            f.write(f"{r['step']},{r['step'] // 14},{fmt(r['loss'])},{fmt(r['grad_norm'])},"
                    f"{fmt(r['loss_scale'])},{r['skipped']},0.003,50.1,0.01,0,640.5,67.5,{val}\n")
    with open(os.path.join(path, "layers.csv"), "w") as f:
        f.write(LAYERS_HEADER + "\n")
        for r in series:
            for n in LAYERS:
                f.write(f"{r['step']},{n},{fmt(r['layers'][n])},1.5,0.75,"
                        f"{fmt(r['underflow'][n])},{r['nonfinite'][n]}\n")
    if ranks is not None:
        with open(os.path.join(path, "ranks.csv"), "w") as f:
            f.write("step,rank,pp_rank,dp_rank,local_loss,loss_scale,grad_norm_local\n")
            for step, rank, scale in ranks:
                f.write(f"{step},{rank},0,{rank},1.25,{fmt(scale)},0.5\n")
    return path


FP8_LINEARS = ["video.patch"] + [f"blocks.{i}.{m}" for i in range(DEPTH)
                                  for m in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")] + ["head.cls"]


def add_fp8_columns(path, frozen=None, underflow=1e-4):
    """Rewrites a run's layers.csv with the 15 fp8 columns (docs/traces.md): the FP8 linears' scales
    those of delayed scaling (history 1024, max, margin 0: 448 / the largest amax so far, 57344 for dy,
    1 at step 0) from amaxes that wander, in float32 as avtrain computes them; `frozen`'s stay at 1 and
    its dy underflows (90 %); the other modules' fp8 fields empty."""
    meta_path = os.path.join(path, "run.json")
    meta = json.load(open(meta_path))
    meta["config"].update({"precision.mode": "fp8", "precision.fp8_history": 1024, "precision.fp8_amax": "max",
                           "precision.fp8_margin": 0})
    json.dump(meta, open(meta_path, "w"), indent=2, sort_keys=True)
    rows = open(os.path.join(path, "layers.csv")).read().splitlines()
    rnd = random.Random(5)
    largest = {}
    out = [rows[0] + "," + ",".join(f"fp8_{t}_{s}" for t in ("x", "w", "dy")
                                    for s in ("amax", "scale", "underflow", "saturated", "range"))]
    for line in rows[1:]:
        step, name = line.split(",")[:2]
        if name not in FP8_LINEARS:
            out.append(line + "," * 15)
            continue
        fields = []
        for t, fmax, size in (("x", 448.0, 3.0), ("w", 448.0, 0.1), ("dy", 57344.0, 1e-6)):
            amax = np.float32(size * (1 + 0.3 * rnd.uniform(-1, 1)))
            key = (name, t)
            scale = np.float32(1.0) if key not in largest or name == frozen else np.float32(fmax) / largest[key]
            largest[key] = max(largest.get(key, np.float32(0)), amax)
            uf = 0.9 if name == frozen and t == "dy" else underflow
            fields += ["%.9g" % amax, "%.9g" % scale, fmt(uf), "0", "12.5"]
        out.append(line + "," + ",".join(fields))
    open(os.path.join(path, "layers.csv"), "w").write("\n".join(out) + "\n")


def check_fp8(c, module, d, base, noisy_copy):
    """FP8 statistics: a frozen module whose layer parts is named, with the deck line that leaves it
    out of FP8; the same run without the freeze names none; a run without fp8 columns has no section."""
    frozen = "blocks.1.mlp.fc1"
    parts = noisy_copy(6)
    for r in parts[12:]:
        r["layers"][frozen] *= 0.01  # no weight gradient to speak of: its share collapses
    write_run(d("fp8_frozen"), parts)
    add_fp8_columns(d("fp8_frozen"), frozen=frozen)
    write_run(d("fp8_fine"), noisy_copy(6))
    add_fp8_columns(d("fp8_fine"))
    write_run(d("fp8_underflow"), parts)
    add_fp8_columns(d("fp8_underflow"), underflow=0.2)
    res = {k: run_in_process(module, [d("base"), d(k), "--json", d(k + ".json")])
           for k in ("fp8_frozen", "fp8_fine", "fp8_underflow")}
    docs = {k: json.load(open(d(k + ".json"))) for k in res if os.path.isfile(d(k + ".json"))}
    rc, out, err = res["fp8_frozen"]
    j = docs.get("fp8_frozen", {})
    keep = ("precision.fp8_layers = video.patch,blocks.0.*,blocks.1.attn.qkv,blocks.1.attn.proj,"
            "blocks.1.mlp.fc2,head.*")
    c.check(rc == 1 and f"fp8 scaling fails in {frozen}: x: its scale does not follow its amax from step 1" in out
            and "dy: its scale does not follow its amax from step 1 (1 where the recipe gives" in out
            and "90 % of its values underflow to zero (median)" in out
            and f"suggest: leave {frozen} out of FP8: {keep}" in out,
            f"fp8_frozen: exit {rc}, the frozen module named with the deck line:\n{out}{err}")
    c.check(j.get("schema_version") == 5 and j.get("fp8_failing") == [frozen] and j.get("fp8_suggestion") == keep
            and [M["name"] for M in j["fp8_scaling"]["modules"]] == FP8_LINEARS
            and all(not T["scale_follows_amax"] and T["scale_off_from_step"] == 1
                    for M in j["fp8_scaling"]["modules"] if M["name"] == frozen for T in M["tensors"]),
            f"fp8_frozen.json: {j.get('fp8_failing')} {j.get('fp8_suggestion')}")
    rc, out, err = res["fp8_fine"]
    j = docs.get("fp8_fine", {})
    c.check(rc == 0 and "fp8 scaling: every tensor of the 10 FP8 linears within the limits" in out
            and j.get("fp8_failing") == [] and j["fp8_scaling"]["failing"] == [],
            f"fp8_fine: exit {rc}, nothing named:\n{out}{err}")
    # Underflow alone (20 % of every tensor's values): every module fails its scaling, none stays.
    rc, out, err = res["fp8_underflow"]
    j = docs.get("fp8_underflow", {})
    c.check(rc == 1 and j.get("fp8_failing") == FP8_LINEARS and j.get("fp8_suggestion") == "precision.mode = bf16"
            and "x: 20 % of its values underflow to zero (median)" in out,
            f"fp8_underflow: exit {rc}: {j.get('fp8_failing')} {j.get('fp8_suggestion')}\n{out}")
    rc, out, _ = run_in_process(module, [d("base"), d("same")])
    c.check("fp8 scaling" not in out, "a run without fp8 columns has no fp8 section")


def fmt(v):
    if isinstance(v, str):
        return v
    return "nan" if math.isnan(v) else ("inf" if v == math.inf else "%.17g" % v)


class Checker:
    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print(f"FAIL: {what}")


def run_command(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def load_reconcile():
    loader = SourceFileLoader("avtrain_reconcile", RECONCILE)
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def run_in_process(module, args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = module.main(args)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def main():
    tmp = tempfile.mkdtemp(prefix="test_reconcile.")
    c = Checker()
    try:
        d = lambda name: os.path.join(tmp, name)
        base = base_series()
        write_run(d("base"), base)
        write_run(d("same"), base, meta=dict(RUN_JSON, data=dict(RUN_JSON["data"], dir="/elsewhere")))

        def noisy_copy(seed, late=1.0):
            """base with AMP-like noise: 1e-4 over the first 10 steps, then `late` times 1 % / 3 %."""
            rnd = random.Random(seed)
            out = copy.deepcopy(base)
            for r in out:
                a = 1e-4 if r["step"] < 10 else late
                r["loss"] *= 1 + 0.01 * a * rnd.uniform(-1, 1)
                r["grad_norm"] *= 1 + 0.03 * a * rnd.uniform(-1, 1)
                for n in LAYERS:
                    r["layers"][n] *= 1 + 0.03 * a * rnd.uniform(-1, 1)
            return out
        noisy = noisy_copy(2)
        write_run(d("noisy"), noisy, mode="bf16")
        check_fp8(c, load_reconcile(), d, base, noisy_copy)
        # The metrics of the field at the last evaluation: judged where every run has them (a trace from
        # before them is judged on val_loss and val_acc alone); a mAP 0.1 down fails, 0.005 does not;
        # an infinite d' (AUC 1) is not judged.
        field = {"val_top5": 0.9, "val_map": 0.6, "val_auc": 0.9, "val_dprime": 1.8}
        write_run(d("field"), base, field=field)
        write_run(d("field_close"), noisy, mode="bf16", field=dict(field, val_map=0.595, val_dprime="inf"))
        write_run(d("field_map_down"), noisy, mode="bf16", field=dict(field, val_map=0.5))
        # the band: an FP32 twin that wanders 10x as far as the noisy run; a CAND inside it and
        # one that leaves it only from step 40 (loss 30 % up: more than the single defaults see)
        write_run(d("twin"), noisy_copy(3, late=10.0))
        write_run(d("inside"), noisy_copy(4, late=5.0), mode="bf16")
        leaves = noisy_copy(4, late=5.0)
        for r in leaves[40:]:
            r["loss"] *= 1.3
        write_run(d("leaves"), leaves, mode="bf16")
        early = copy.deepcopy(noisy)
        early[3]["loss"] *= 1.01  # a numerics bug shows in the first steps
        write_run(d("early"), early, mode="bf16")

        def scaled(names, factor=0.1):
            s = copy.deepcopy(noisy)
            for r in s:
                for n in names:
                    r["layers"][n] *= factor
            return s
        write_run(d("two"), scaled(["audio.bn", "blocks.0.attn.qkv"]), mode="bf16")
        write_run(d("group"), scaled([n for n in LAYERS if n.startswith(("blocks.1.", "head."))]
                                     + ["blocks.0.ln2"], factor=0.01), mode="bf16")
        write_run(d("zero"), scaled(["blocks.0.mlp.fc1"], factor=0.0), mode="fp16")

        def with_meta(edit):
            m = copy.deepcopy(RUN_JSON)
            edit(m)
            return m
        # the segment check: a twin that wanders x4.5 both ways (a wave of 6 steps) draws a band wide
        # enough to hold a loss 2.2 times up over the last 30 % (steps 42-59), beyond 4 times the
        # floor (0.18) of its late segment, which fails it all the same; a CAND that wanders both
        # ways passes
        def wave(amp, phase=0.0, offset=1.0, late_from=STEPS):
            out = copy.deepcopy(base)
            for r in out[10:]:
                r["loss"] *= math.exp(amp * math.sin(2 * math.pi * r["step"] / 6 + phase))
                if r["step"] >= late_from:
                    r["loss"] *= offset
            return out
        write_run(d("wave_twin"), wave(1.5))
        write_run(d("wave"), wave(0.2, 1.0), mode="bf16")
        write_run(d("wave_up"), wave(0.2, 1.0, 2.2, 42), mode="bf16")
        write_run(d("wave_down"), wave(0.2, 1.0, 1 / 2.2, 42), mode="bf16")
        write_run(d("null_up"), wave(0.0, 0.0, 2.0, 42))  # an FP32 pair whose late part parts by x2
        seed8 = with_meta(lambda m: m.update(seed=8))
        write_run(d("seed8"), base, meta=seed8)
        write_run(d("seed8_up"), wave(0.0, 0.0, 2.0, 42), meta=seed8)
        # The resolution (the smallest sustained offset that FAILs): FP32's run itself judged as CAND;
        # a run whose late loss is low (0.1, as the quickstart's 0.13) doubled over its last 40 %, which
        # one BASE's 0.15 + 0.2|x| passes (it must say that it cannot judge there) and the band of a
        # twin that wanders 2 % fails.
        write_run(d("base_bf16"), base, mode="bf16")
        rnd = random.Random(5)
        low = [dict(r, loss=0.1 + 2.8 * math.exp(-r["step"] / 8)) for r in base]
        write_run(d("low"), low)
        write_run(d("low_twin"), [dict(r, loss=r["loss"] * (1 + 0.02 * rnd.uniform(-1, 1))) for r in low])
        write_run(d("low_doubled"), [dict(r, loss=r["loss"] * (2 if r["step"] >= 0.6 * STEPS else 1)) for r in low],
                  mode="bf16")
        # values at the ends of the range: a late loss of 1e-200 against 1e200 (a log ratio beyond what
        # exp() can take) and an inf grad norm are judged, with no traceback nor warning
        write_run(d("tiny"), [dict(r, loss=1e-200 if r["step"] >= 42 else r["loss"]) for r in base])
        write_run(d("huge"), [dict(r, loss=1e200 if r["step"] >= 42 else r["loss"],
                                   grad_norm=math.inf if r["step"] == 50 else r["grad_norm"]) for r in base], mode="bf16")
        write_run(d("width"), base, meta=with_meta(lambda m: m["config"].update({"model.width": 32})))
        write_run(d("seed"), base, meta=with_meta(lambda m: m.update(seed=8)))
        write_run(d("data"), base, meta=with_meta(
            lambda m: m["data"]["shards"][1].update(bytes=4268000)))
        write_run(d("split"), base, meta=with_meta(
            lambda m: m["config"].update({"train.micro_batch": 32, "train.micro_batches": 1})))
        write_run(d("batch"), base, meta=with_meta(
            lambda m: m["config"].update({"train.micro_batches": 1})))
        write_run(d("dp"), base, meta=with_meta(lambda m: m["layout"].update(dp=2)))
        write_run(d("tf32"), base, mode="tf32")
        # Augmentation: another mixup alpha is another run; the defaults written out are the run
        # from before [augment] existed; a mask width with its masks off changes nothing.
        write_run(d("mixup"), base, meta=with_meta(lambda m: m["config"].update({"augment.mixup": 0.4})))
        write_run(d("aug_off"), base, meta=with_meta(lambda m: m["config"].update(
            {"augment.mixup": 0.0, "augment.flip": False, "augment.crop_scale": 1.0, "data.clip_seconds": 0.0,
             "augment.freq_masks": 0, "augment.freq_mask_width": 27})))
        write_run(d("masks"), base, meta=with_meta(lambda m: m["config"].update(
            {"augment.time_masks": 2, "augment.time_mask_width": 10})))
        write_run(d("masks_wider"), base, meta=with_meta(lambda m: m["config"].update(
            {"augment.time_masks": 2, "augment.time_mask_width": 20})))
        write_run(d("optim"), base, meta=with_meta(
            lambda m: m["config"].update({"optim.lr": 0.001, "train.threads": 1})))

        # fp16 with two skipped steps: non-finite loss / gradients there, scale halved after each;
        # the applied steps carry the noisy run's updates in order (runs align by update)
        skip = []
        scale = 65536.0
        update = 0
        for step in range(len(noisy)):
            r = copy.deepcopy(noisy[update])
            r["step"] = step
            if step in (5, 9):
                r.update(skipped=1, loss="-nan", grad_norm="inf", loss_scale=scale)
                r["layers"]["head.cls"] = "inf"
                r["nonfinite"]["head.cls"] = 3
                scale /= 2
            else:
                r["loss_scale"] = scale
                update += 1
            skip.append(r)
        write_run(d("skip"), skip, mode="fp16")
        bad_loss = copy.deepcopy(noisy)
        bad_loss[30]["loss"] = math.nan
        write_run(d("nanloss"), bad_loss, mode="bf16")
        late = copy.deepcopy(noisy)
        for r in late[20:]:
            r["loss"] *= 1.5
        write_run(d("late"), late, mode="bf16")

        good_ranks = [(s, r, 1024.0) for s in range(STEPS) for r in range(3)]
        bad_ranks = [(s, r, 512.0 if (s == 17 and r == 2) else 1024.0) for s in range(STEPS) for r in range(3)]
        write_run(d("ranks_ok"), noisy, mode="bf16", ranks=good_ranks)
        write_run(d("ranks_bad"), noisy, mode="bf16", ranks=bad_ranks)

        # malformed inputs
        write_run(d("nonnum"), base)
        lines = open(d("nonnum/trace.csv")).read().splitlines()
        lines[4] = lines[4].replace(lines[4].split(",")[3], "abc", 1)
        open(d("nonnum/trace.csv"), "w").write("\n".join(lines) + "\n")
        write_run(d("badhdr"), base)
        open(d("badhdr/trace.csv"), "w").write("step,epoch,loss\n0,0,1.0\n")
        write_run(d("norows"), base)
        open(d("norows/layers.csv"), "w").write(LAYERS_HEADER + "\n")
        write_run(d("nolayers"), base)
        os.remove(d("nolayers/layers.csv"))
        write_run(d("badcount"), base)
        with open(d("badcount/layers.csv"), "a") as f:
            f.write("60,audio.conv,1,1,1,0,inf\n")
        write_run(d("badjson"), base)
        open(d("badjson/run.json"), "w").write("{\"config\": {")
        # inputs that ended in a traceback or in a refusal of several lines (validation/fuzz_reconcile.py found
        # most of them; docs/fuzzing.md)
        def damaged(name, file, edit, mode=None, fp8=False):
            write_run(d(name), base, mode=mode)
            if fp8:
                add_fp8_columns(d(name))
            p = os.path.join(d(name), file)
            text = open(p, encoding="utf-8").read()
            open(p, "w", encoding="utf-8").write(edit(text) if callable(edit) else edit)
        damaged("deep_json", "run.json", "[" * 100000 + "]" * 100000)   # json's parser: RecursionError
        damaged("deep_data", "run.json", lambda t: t.replace('"audio_samples": 8000', '"audio_samples": ' + "[" * 100 + "]" * 100))
        damaged("step_2_63", "trace.csv", lambda t: t.replace("\n3,0,", "\n9223372036854775296,0,", 1))  # int64 cast
        damaged("blank_bad_step", "trace.csv", lambda t: t.replace("\n0,0,", "\n\n-1,0,", 1))  # the line after a blank one
        damaged("batch_inf", "run.json", lambda t: t.replace('"train.micro_batches": 2', '"train.micro_batches": Infinity'))
        damaged("fp8_history", "run.json", lambda t: t.replace('"precision.fp8_history": 1024', '"precision.fp8_history": -3'), fp8=True)
        damaged("fp8_margin", "run.json", lambda t: t.replace('"precision.fp8_margin": 0', '"precision.fp8_margin": -5000'), fp8=True)
        damaged("fp8_part", "layers.csv", lambda t: t.replace(",grad_underflow_frac,nonfinite\n", ",grad_underflow_frac,nonfinite,fp8_x_amax\n")
                .replace("\n", ",1\n").replace(",fp8_x_amax,1\n", ",fp8_x_amax\n", 1))
        damaged("newline_column", "trace.csv", lambda t: t.replace(",loss,", ',"lo\nss",', 1))
        damaged("newline_layer", "layers.csv", lambda t: t.replace("\n1,embed,", '\n1,"em\nbed",', 1))
        damaged("newline_key", "run.json", lambda t: t.replace('"model.width"', '"model.wi\\nd\\u2028th"'))

        R = lambda *a: [d(x) if i < 2 else x for i, x in enumerate(a)]
        commands = {  # as a user runs them: the executable itself, through its #! line
            "identical": [RECONCILE] + R("base", "base"),
            "missing": [RECONCILE] + R("base", "does-not-exist"),
            "plot": [PY, PLOT, d("base"), d("skip"), "--out", d("plot.png"), "--title", "test"],
            "plot_band": [PY, PLOT, d("base"), d("twin"), d("leaves"), "--out", d("band.png")],
            "plot_missing": [PY, PLOT, d("base"), d("does-not-exist"), "--out", d("plot2.png")],
            # a tolerance of x e^1e6 (fuzz_reconcile.py): exp() overflowed drawing what is allowed, numpy warned
            "plot_huge_tol": [PY, PLOT, d("base"), d("base"), "--tol", "grad_norm=0,1e6", "--out", d("plot3.png")],
        }
        module = load_reconcile()
        calls = {
            "same": R("base", "same", "--json", d("same.json")),
            "noisy": R("base", "noisy"),
            "two": R("base", "two", "--json", d("two.json")),
            "two_loose": R("base", "two", "--tol", "layer=2.5,0"),
            "zero": R("base", "zero", "--tol", "layer=50,0"),
            "group": R("base", "group"),
            "width": R("base", "width"), "seed": R("base", "seed"), "data": R("base", "data"),
            "split": R("base", "split"), "batch": R("base", "batch"), "dp": R("base", "dp"),
            "optim": R("base", "optim"),
            "mixup": R("base", "mixup"), "aug_off": R("base", "aug_off"),
            "mask_width": R("masks", "masks_wider"),
            "tf32": R("base", "tf32"),
            "tf32_flags": R("base", "tf32", *[f"--tol={k}=0,0" for k in module.METRICS]),
            "tf32_some": R("base", "tf32", "--tol", "loss=0,0"),
            "bad_tol": R("base", "base", "--tol", "speed=1,1"),
            "neg_tol": R("base", "base", "--tol", "loss=-1,0"),
            "nonnum": R("base", "nonnum"), "badhdr": R("base", "badhdr"),
            "norows": R("base", "norows"), "nolayers": R("nolayers", "base"),
            "badjson": R("base", "badjson"), "badcount": R("base", "badcount"),
            **{name: R("base", name) for name in ("deep_json", "deep_data", "step_2_63", "blank_bad_step", "batch_inf",
                                                   "fp8_history", "fp8_margin", "fp8_part", "newline_column",
                                                   "newline_layer", "newline_key")},
            "tol_huge_log": R("base", "base", "--tol", "grad_norm=1e6,0"),  # exp(1e6) in the report's header
            "json_unwritable": R("base", "base", "--json", d("no-such-folder/out.json")),
            "json_to_folder": R("base", "base", "--json", d("base")),
            "skip": R("base", "skip", "--json", d("skip.json")),
            "nanloss": R("base", "nanloss"),
            "late": R("base", "late"), "late_30": R("base", "late", "--steps", "30"),
            "late_20": R("base", "late", "--steps", "20"),
            "early": R("base", "early"),
            "field_close": R("field", "field_close"),
            "field_map_down": R("field", "field_map_down", "--json", d("field.json")),
            "field_old_base": R("base", "field_map_down"),
            "inside": [d("base"), d("twin"), d("inside"), "--json", d("inside.json")],
            "leaves": [d("base"), d("twin"), d("leaves"), "--json", d("leaves.json")],
            "leaves_narrow": [d("base"), d("twin"), d("leaves"), "--band-factor", "0"],
            "band_bad_factor": [d("base"), d("twin"), d("inside"), "--band-factor", "-1"],
            "band_not_comparable": [d("base"), d("width"), d("inside")],
            "ranks_ok": R("base", "ranks_ok"), "ranks_bad": R("base", "ranks_bad", "--json", d("ranks.json")),
            "bad_window": R("base", "base", "--window", "0"),
            "seg_up": [d("base"), d("wave_twin"), d("wave_up"), "--json", d("seg_up.json")],
            "seg_down": [d("base"), d("wave_twin"), d("wave_down")],
            "seg_wave": [d("base"), d("wave_twin"), d("wave"), "--json", d("seg_wave.json")],
            "seg_off": [d("base"), d("wave_twin"), d("wave_up"), "--segment-limit", "0"],
            "seg_single": [d("base"), d("wave_up"), "--tol", "loss=1,0"],  # no FP32 pair: not judged
            "seg_single_null": [d("base"), d("wave_up"), "--tol", "loss=1,0", "--null", f"{d('base')},{d('wave_twin')}"],
            "seg_null": [d("base"), d("wave_twin"), d("wave_up"), "--null", f"{d('base')},{d('null_up')}",
                         "--json", d("seg_null.json")],
            "seg_null_seed": [d("base"), d("wave_twin"), d("wave_up"), f"--null={d('seed8')},{d('seed8_up')}"],
            "seg_null_bad": [d("base"), d("wave_twin"), d("wave_up"), "--null", d("base")],
            "seg_null_width": [d("base"), d("wave_twin"), d("wave_up"), "--null", f"{d('base')},{d('width')}"],
            "seg_null_mixed": [d("base"), d("wave_twin"), d("wave_up"), "--null", f"{d('base')},{d('seed8')}"],
            "res_single": R("base", "noisy", "--json", d("res_single.json")),
            "res_single_ref": R("base", "base_bf16", "--json", d("res_single_ref.json")),
            "res_band": [d("base"), d("wave_twin"), d("noisy"), "--json", d("res_band.json")],
            "res_none": [d("base"), d("twin"), d("noisy"), "--band-factor", "0", "--tol", "loss=0,0"],
            "res_first": R("base", "base_bf16", "--first-steps", "60"),  # as the PyTorch peer is judged
            "res_first_some": R("base", "base_bf16", "--first-steps", "30", "--steps", "40"),
            "low_doubled": [d("low"), d("low_doubled"), "--json", d("low_doubled.json")],
            "extremes": [d("tiny"), d("huge"), "--json", d("extremes.json")],
            "low_doubled_band": [d("low"), d("low_twin"), d("low_doubled")],
        }
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            pending = {name: pool.submit(run_command, cmd) for name, cmd in commands.items()}
            res = {name: run_in_process(module, args) for name, args in calls.items()}
            res.update({name: f.result() for name, f in pending.items()})

        def expect(name, rc, stdout_re=None, stderr_re=None):
            got, out, err = res[name]
            c.check(got == rc, f"{name}: exit {got}, expected {rc}\n{out[-2000:]}{err}")
            if stdout_re:
                c.check(re.search(stdout_re, out, re.M), f"{name}: stdout lacks /{stdout_re}/\n{out}")
            if stderr_re:
                c.check(re.search(stderr_re, err, re.M), f"{name}: stderr lacks /{stderr_re}/\n{err}")
            if rc == 2 and name not in ("bad_window", "band_bad_factor", "bad_tol", "neg_tol",
                                        "seg_null_bad"):  # argparse: usage + error
                c.check(len(err.strip().splitlines()) == 1 and out == "",
                        f"{name}: expected one line on stderr, nothing on stdout\n{out}{err}")
            elif rc in (0, 1):
                last = out.strip().splitlines()[-1] if out.strip() else ""
                c.check(last.startswith("verdict: PASS" if rc == 0 else "verdict: FAIL ("),
                        f"{name}: last line is {last!r}")
                c.check(err == "", f"{name}: a verdict with something on stderr: {err}")

        expect("identical", 0, r"max rel diff 0,")
        expect("same", 0)  # only data.dir differs
        expect("noisy", 0, r"\(bf16, 60 steps\)")
        expect("two", 1, r"^suggest: precision\.fp32_layers = audio\.bn,blocks\.0\.attn\.qkv$")
        expect("two_loose", 0)
        expect("zero", 1, r"1 layer\(s\) beyond tolerance, first blocks\.0\.mlp\.fc1 from step 0")
        expect("group", 1, r"^suggest: precision\.fp32_layers = blocks\.0\.ln2,blocks\.1\.\*,head\.\*$")
        expect("width", 2, stderr_re=r"^avtrain-reconcile: runs are not comparable: model\.width differs \(64 vs 32\)$")
        expect("seed", 2, stderr_re=r"not comparable: seed differs \(7 vs 8\)")
        expect("data", 2, stderr_re=r"not comparable: data\.shards\[1\]\.bytes differs")
        expect("split", 0)  # 16 x 2 and 32 x 1: the same global batch
        expect("batch", 2, stderr_re=r"not comparable: global batch differs \(32 vs 16\)")
        expect("dp", 2, stderr_re=r"not comparable: global batch differs \(32 vs 64\)")
        expect("mixup", 2, stderr_re=r"^avtrain-reconcile: runs are not comparable: augment\.mixup differs \(0 vs 0\.4\)$")
        expect("aug_off", 0)
        expect("mask_width", 2, stderr_re=r"not comparable: augment\.time_mask_width differs \(10 vs 20\)")
        expect("optim", 0)  # optimizer and threads may differ; these traces are the same
        expect("tf32", 2, stderr_re=r"tf32/run\.json: precision\.mode 'tf32' has no default")
        expect("tf32_flags", 0, r"loss 0\|x\| \(flag\)  grad_norm x1 \(flag\)")
        expect("tf32_some", 2, stderr_re=r"give --tol for each of grad_norm, layer, val_loss")
        expect("bad_tol", 2, stderr_re=r"unknown metric 'speed'")
        expect("neg_tol", 2, stderr_re=r"must be finite and >= 0")
        expect("missing", 2, stderr_re=r"does-not-exist: no such trace directory")
        expect("nonnum", 2, stderr_re=r"nonnum/trace\.csv: line 5: non-numeric grad_norm 'abc'")
        expect("badhdr", 2, stderr_re=r"badhdr/trace\.csv: bad header")
        expect("norows", 2, stderr_re=r"norows/layers\.csv: no rows")
        expect("nolayers", 2, stderr_re=r"nolayers/layers\.csv: missing")
        expect("badcount", 2, stderr_re=r"badcount/layers\.csv: line \d+: nonfinite 'inf' is not a whole number")
        expect("badjson", 2, stderr_re=r"badjson/run\.json: malformed JSON")
        deeper = r"malformed \(lists or objects nested deeper than 64 levels\)$"
        expect("deep_json", 2, stderr_re=r"deep_json/run\.json: " + deeper)
        expect("deep_data", 2, stderr_re=r"deep_data/run\.json: " + deeper)
        expect("step_2_63", 2, stderr_re=r"step_2_63/trace\.csv: line 5: step '9223372036854775296' is not a whole "
                                         r"number from 0 to 2\^53$")
        expect("blank_bad_step", 2, stderr_re=r"blank_bad_step/trace\.csv: line 3: step '-1' is not a whole number")
        expect("batch_inf", 2, stderr_re=r"batch_inf/run\.json: malformed \(train\.micro_batch, train\.micro_batches "
                                         r"or layout\.dp missing or not a number\)$")
        expect("fp8_history", 2, stderr_re=r"fp8_history/run\.json: malformed \(precision\.fp8_history -3: below 1\)$")
        expect("fp8_margin", 2, stderr_re=r"fp8_margin/run\.json: malformed \(precision\.fp8_margin -5000: outside \[0, 18\]\)$")
        expect("fp8_part", 2, stderr_re=r"fp8_part/layers\.csv: bad header \(has fp8_x_amax but lacks fp8_x_scale, "
                                        r"fp8_x_underflow, .*, fp8_dy_range\)$")
        # what a file holds, quoted in a refusal, with its line breaks and control characters as \xNN
        expect("newline_column", 2, stderr_re=r"newline_column/trace\.csv: bad header \(lacks column\(s\) loss\): "
                                              r"step,epoch,lo\\x0ass,grad_norm,")
        expect("newline_layer", 2, stderr_re=r"newline_layer/layers\.csv: step 1 has layer 'em\\x0abed', not among step 0's")
        expect("newline_key", 2, stderr_re=r"not comparable: model\.wi\\x0ad\\u2028th differs \(absent vs 64\)$")
        expect("tol_huge_log", 0, r"  grad_norm xinf \(flag\)  ")
        expect("json_unwritable", 2, stderr_re=r"no-such-folder/out\.json: cannot write \(No such file or directory\)$")
        expect("json_to_folder", 2, stderr_re=r"/base: cannot write \(Is a directory\)$")
        c.check(not os.path.exists(d("base.tmp")), "json_to_folder: base.tmp left behind")
        expect("skip", 0, r"^skipped: CAND 2 \[5, 9\], BASE 0 \[\]$")
        expect("nanloss", 1, r"CAND loss is non-finite at 1 non-skipped step\(s\), first 30")
        expect("late", 1, r"loss beyond tolerance from step 2\d ")  # every window counts
        expect("late_30", 1, r"^steps: 30 in common \(0\.\.29\), 30 updates compared ")
        expect("late_20", 0)
        expect("early", 1, r"loss at step 3 of the first 10 beyond tolerance")
        expect("field_close", 0, r"val_map 0\.595 against 0\.6 \(allowed 0\.01\), val_auc 0\.9 against 0\.9 "
                                 r"\(allowed 0\.01\)$")
        expect("field_map_down", 1, r"final val_map 0\.5 against 0\.6 \(allowed difference 0\.01\)")
        with open(d("field.json")) as f:
            end = json.load(f)["end"]
        c.check(end["val_map"]["ratio"] > 1 and end["val_dprime"]["ratio"] <= 1, f"field.json end: {end}")
        expect("field_old_base", 0, r"^final validation \(step 59/59\): val_loss 1\.5 against 1\.5 \(allowed [0-9.e-]+\), "
                                    r"val_acc 0\.5 against 0\.5 \(allowed [0-9.e-]+\)$")
        expect("inside", 0, r"^  mode: band: the spread of 2 BASE runs, widened 5x")
        expect("leaves", 1, r"^first step beyond tolerance: 4\d$")
        expect("leaves_narrow", 1)
        expect("band_bad_factor", 2, stderr_re=r"--band-factor: must be a finite number >= 0")
        expect("band_not_comparable", 2, stderr_re=r"not comparable: model\.width differs")
        expect("ranks_ok", 0, r"^ranks: BASE no ranks\.csv; CAND consistent$")
        expect("ranks_bad", 1, r"CAND ranks disagree on loss_scale at 1 step\(s\), first step 17: "
                               r"1024 on rank\(s\) 0,1; 512 on rank\(s\) 2")
        expect("bad_window", 2, stderr_re=r"--window: must be >= 1")
        expect("plot_missing", 2, stderr_re=r"^plot_traces\.py: .*does-not-exist: no such trace directory$")
        # the segment check: inside the band step by step, a sustained offset fails its segment
        expect("seg_up", 1, r"^verdict: FAIL \(loss over the late segment \(steps 42-59\) \+120\.0 % against "
                            r"FP32's center: effect \+4\.38, beyond 4 \(FP32 pairs: [0-9.e-]+ RMS of 1, floor 0\.18\)\)$")
        expect("seg_up", 1, r"^  late +42-59 +loss +\+0\.7885 +\+120\.0 % .* \*$")
        expect("seg_up", 1, r"^first step beyond tolerance: 42$")
        expect("seg_down", 1, r"loss over the late segment \(steps 42-59\) -54\.5 % ")
        expect("seg_wave", 0, r"^segments: mean log\(cand / center\) .* 1 of the BASE runs, 0 from --null; "
                              r"effect = mean / max\(their RMS, floor\), beyond 4 fails:$")
        expect("seg_off", 0, r"not judged \(--segment-limit 0\):$")
        expect("seg_single", 0, r"none: the floors alone; .*not judged \(no FP32 pair: give two BASE runs or --null A,B\):$")
        expect("seg_single_null", 1, r"0 of the BASE runs, 1 from --null; .*beyond 4 fails:$")
        expect("seg_null", 0, r"1 of the BASE runs, 1 from --null")  # FP32 itself parts by x2 there
        expect("seg_null_seed", 0)  # a pair of another seed calibrates too
        expect("seg_null_bad", 2, stderr_re=r"--null: .* is not A,B")
        expect("seg_null_width", 2, stderr_re=r"^avtrain-reconcile: runs are not comparable: --null .*: "
                                              r"model\.width differs \(64 vs 32\)$")
        expect("seg_null_mixed", 2, stderr_re=r"not comparable: --null .*: seed differs \(7 vs 8\)$")

        # the resolution: stated in every report, next to the verdict; a property of the comparison (the
        # same for any CAND of one mode); FP32's run doctored just beyond it FAILs, just within it PASSes
        for name, (rc, out, _) in res.items():
            lines = out.strip().splitlines()
            if rc in (0, 1) and not name.startswith("plot"):  # plot_traces.py prints no report
                c.check(len(lines) > 1 and lines[-2].startswith("resolution") and "verdict" not in lines[-2],
                        f"{name}: the line before the verdict is not the resolution: {lines[-2:]}")
        expect("res_single", 0, r"^  late +42-59 +loss +[0-9.]+ +\+54\.8 % windows +/2\.21 windows +cannot judge$")
        expect("res_single", 0, r"^resolution \(the smallest sustained offset that FAILs, up and down\): loss early "
                                r"\+31 % and -31 %, .*; cannot judge loss late, grad_norm early, grad_norm middle, "
                                r"grad_norm late: give FP32's twin as a second BASE")
        # the band of a twin whose grad norm is the BASE's: its floor alone, x1.5 (log 0.405) either way
        # The early bound is x1.5 to the last bit: +50 % where this was written (Zen 4), +49.9 % on a Zen 3 (numpy).
        expect("res_band", 0, r"^resolution \(.*\): loss early .*; grad_norm early \+(50|49\.9) % and -33\.3 %, .*"
                              r"late \+49\.9 % and -33\.3 %$")
        expect("res_none", 1, r"^resolution: none: FP32's reference run itself FAILs this comparison, with no offset "
                              r"\(loss beyond tolerance from step 0 ")
        expect("extremes", 1, r"^  late +42-59 +loss +\+[0-9.]+ +\+inf % ")
        expect("res_first", 0, r"^resolution: every compared update lies within the first 60 steps, judged one by one")
        expect("res_first_some", 0, r"^resolution \(.*\): loss early within the first steps, middle within the first "
                                    r"steps, late \+[0-9.]+ % and -[0-9.]+ %; grad_norm early within")
        expect("low_doubled", 0, r"^  late +42-59 +loss +0\.1\d* +x[0-9.]+ +windows +none +- +cannot judge$")
        expect("low_doubled", 0, r"; cannot judge .*loss late, .*: give FP32's twin as a second BASE \(train\.init_ulps 65536")
        expect("low_doubled_band", 1, r"verdict: FAIL \(loss beyond tolerance from step (3[6-9]|4[0-5]) ")
        rdocs = {}
        for name in ("res_single", "res_single_ref", "res_band", "low_doubled"):
            with open(d(name + ".json")) as f:
                rdocs[name] = json.load(f)["resolution"]
        c.check(rdocs["res_single"] == dict(rdocs["res_single_ref"]), "resolution: another CAND of the mode, another resolution")
        late = {(r["segment"], r["metric"]): r for r in rdocs["low_doubled"]["rows"]}[("late", "loss")]
        c.check(late["up"]["fails_at"] > 2 and late["down"] is None and not late["judged"]
                and "loss late" in rdocs["low_doubled"]["cannot_judge"], f"low_doubled.json: {late}")
        c.check(any("segment" in r[k]["by"] for r in rdocs["res_band"]["rows"] for k in ("up", "down") if r[k])
                and all(r["from_step"] == 10 for r in rdocs["res_band"]["rows"] if r["segment"] == "early"),
                f"res_band.json: no offset found by the segment check, or the first steps doctored: {rdocs['res_band']}")
        probes = []  # (mode's bases, row, direction, factor, expected exit)
        for mode, bases, picks in (("res_single", ["base"], (("late", "loss", "up"), ("middle", "grad_norm", "down"))),
                                   ("res_band", ["base", "wave_twin"],
                                    (("late", "loss", "up"), ("late", "loss", "down"), ("early", "grad_norm", "up")))):
            rows = {(r["segment"], r["metric"]): r for r in rdocs[mode]["rows"]}
            for seg, metric, way in picks:
                row = rows[(seg, metric)]
                side = row[way]
                c.check(side is not None, f"{mode} {seg} {metric} {way}: no offset fails ({row})")
                if side is None:
                    continue
                f, g = side["fails_at"], side["passes_at"]
                c.check(abs(math.log(f) - math.log(g)) <= 1e-3 * abs(math.log(f)) + 1e-12 and abs(math.log(g)) < abs(math.log(f)),
                        f"{mode} {seg} {metric} {way}: {g} passes, {f} fails: not a bracket of 0.1 %")
                probes += [(mode, bases, row, metric, f ** 1.01, 1), (mode, bases, row, metric, f ** 0.99, 0)]
        for i, (mode, bases, row, metric, f, want) in enumerate(probes):
            series = copy.deepcopy(base)
            for r in series:
                if row["from_step"] <= r["step"] <= row["to_step"]:
                    r[metric] *= f
            name = f"probe{i}"
            write_run(d(name), series, mode="bf16")
            got, out, err = run_in_process(module, [d(b) for b in bases] + [d(name)])
            c.check(got == want, f"{mode}: FP32's run with its {metric} x{f:.6g} over steps {row['from_step']}-"
                                 f"{row['to_step']}: exit {got}, expected {want} (the resolution's {row})\n{out[-600:]}{err}")

        # the metric itself: trailing mean, a non-finite value stays in its windows, the floor
        sm = module.smooth([1.0, 2.0, 3.0, 4.0], 2).tolist()
        c.check(sm == [1.0, 1.5, 2.5, 3.5], f"smooth: {sm}")
        sm = module.smooth([1.0, math.inf, 3.0, 4.0], 2).tolist()
        c.check(sm == [1.0, math.inf, math.inf, 3.5], f"smooth with inf: {sm}")
        c.check(module.envelope([0, 3, 0, 0, 1, 0], 1, 2).tolist() == [3, 3, 3, 1, 1, 1],
                "envelope: the largest from 1 step before to 2 after")
        cmp = module.compare([[1.0, 1.0]], [1.05, 1.5], (0.1, 0.2), 0.0, 1)  # |d| <= 0.1 + 0.2 |b|
        c.check(np.allclose(cmp["ratio"], [0.05 / 0.3, 0.5 / 0.3], rtol=1e-12), f"compare atol+rtol: {cmp['ratio'].tolist()}")
        cmp = module.compare([[1.0, 2.0], [1.0, 2.0]], [0.0, 2.0], (0.1, 0.0), 5.0, 1, log=True)
        c.check(cmp["ratio"].tolist() == [math.inf, 0.0], f"compare log: 0 is infinitely far, {cmp['ratio'].tolist()}")
        cmp = module.compare([[1.0] * 4, [1.0, 1.2, 1.0, 1.0]], [1.0, 1.0, 1.0, 1.3], (0.0, 0.0), 2.0, 1)
        spread = 0.1 / 1.1  # half the runs' spread at step 1, relative to their center there
        c.check(abs(cmp["half"][3] - spread) < 1e-12 and abs(cmp["ratio"][3] - 0.3 / (2 * spread)) < 1e-9,
                f"compare band: the spread 2 steps before still counts ({cmp['half'].tolist()})")
        c.check(module.segment_bounds(60) == [("early", 0, 21), ("middle", 21, 42), ("late", 42, 60)]
                and module.segment_bounds(200)[2] == ("late", 140, 200), f"segment_bounds: {module.segment_bounds(60)}")
        sg = module.segment_means(np.array([0.1, math.nan, 0.3, -math.inf, 0.5, 0.7]), [("a", 0, 4), ("b", 4, 6), ("c", 6, 6)])
        c.check(np.allclose(sg[:2], [0.2, 0.6]) and math.isnan(sg[2]), f"segment_means: finite values only, {sg}")
        for edge in (0.3, 5.0, 1e-4):  # the bisection of the resolution: lo passes, hi fails, 0.1 % apart
            lo, hi = module.offset_bracket(lambda x: x > edge)
            c.check(lo <= edge < hi and hi - lo <= 1e-3 * hi, f"offset_bracket at {edge}: {lo}, {hi}")
        c.check(module.offset_bracket(lambda x: False) is None, "offset_bracket: nothing fails")
        lo, hi = module.offset_bracket(lambda x: x > 0)
        c.check(lo == 0 and 0 < hi <= 1e-9, f"offset_bracket: any offset fails: {lo}, {hi}")
        sh = module.layer_shares(np.array([[3.0, 0.0], [4.0, 2.0]]))
        c.check(sh.tolist() == [[0.6, 0.0], [0.8, 1.0]], f"layer_shares: {sh.tolist()}")

        # group: the suggested globs select exactly the exceeding modules
        line = [x for x in res["group"][1].splitlines() if x.startswith("suggest: ")][0]
        patterns = line.split(" = ", 1)[1].split(",")
        chosen = {n for n in LAYERS if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
        want = {n for n in LAYERS if n.startswith(("blocks.1.", "head."))} | {"blocks.0.ln2"}
        c.check(chosen == want, f"group: globs select {sorted(chosen)}, expected {sorted(want)}")
        c.check("suggest:" not in res["noisy"][1], "noisy: a suggestion line on a PASS")

        # --json documents
        docs = {}
        for name in ("same", "two", "skip", "ranks", "inside", "leaves", "seg_up", "seg_wave", "seg_null"):
            try:
                with open(d(name + ".json")) as f:
                    docs[name] = json.load(f)
            except (OSError, ValueError) as e:
                c.check(False, f"{name}.json: not written or not JSON ({e})")
            c.check(not os.path.exists(d(name + ".json.tmp")), f"{name}.json.tmp left behind")
        if "two" in docs:
            j = docs["two"]
            c.check(j["verdict"] == "FAIL" and j["reasons"], "two.json: verdict/reasons")
            c.check(j["tolerances"] == {k: list(v) for k, v in module.DEFAULT_TOLERANCES["bf16"].items()},
                    f"two.json: tolerances {j['tolerances']}")
            c.check(j["mode"] == "single" and j["schema_version"] == 5, "two.json: mode, schema")
            c.check(j["cand"]["precision_mode"] == "bf16" and j["bases"][0]["precision_mode"] == "fp32",
                    "two.json: modes")
            c.check({L["name"] for L in j["layers"] if L["exceeds"]} == {"audio.bn", "blocks.0.attn.qkv"},
                    "two.json: exceeding layers")
            c.check(len(j["layers"]) == len(LAYERS) and {L["name"] for L in j["layers"][:2]}
                    == {"audio.bn", "blocks.0.attn.qkv"} and j["first_step_beyond"] == 0,
                    "two.json: layers ranked with the 10x modules first, from step 0")
            c.check(j["suggestion"] == "precision.fp32_layers = audio.bn,blocks.0.attn.qkv",
                    f"two.json: suggestion {j['suggestion']}")
            c.check(len(j["per_step"]["loss_ratio"]) == STEPS == len(j["per_step"]["step"]),
                    "two.json: per-step arrays")
            for key in ("worst", "worst_step", "first_step_beyond", "max_rel", "median_rel"):
                c.check(all(key in j["metrics"][m] for m in ("loss", "grad_norm", "first_loss")),
                        f"two.json: metrics lack {key}")
        if "same" in docs:
            c.check(docs["same"]["verdict"] == "PASS" and docs["same"]["suggestion"] is None
                    and docs["same"]["metrics"]["loss"]["max_rel"] == 0.0
                    and docs["same"]["first_step_beyond"] is None, "same.json: PASS, no suggestion, 0")
        if "skip" in docs:
            j = docs["skip"]
            c.check(j["steps"]["skipped_cand"] == [5, 9] and 5 not in j["steps"]["compared"]
                    and len(j["steps"]["compared"]) == STEPS - 2, "skip.json: skipped steps excluded")
            head = [L for L in j["layers"] if L["name"] == "head.cls"][0]
            c.check(head["nonfinite_cand"] == 6 and head["nonfinite_base"] == 0,
                    "skip.json: nonfinite counts of head.cls")
        if "inside" in docs and "leaves" in docs:
            j, k = docs["inside"], docs["leaves"]
            c.check(j["mode"] == "band" and len(j["bases"]) == 2 and j["band_factor"] == 5.0
                    and j["tolerance_source"]["loss"] == "band:bf16", "inside.json: band mode")
            c.check(k["verdict"] == "FAIL" and 40 <= k["metrics"]["loss"]["first_step_beyond"] < 50,
                    f"leaves.json: loss first beyond {k['metrics']['loss']['first_step_beyond']}")
        if "seg_up" in docs and "seg_wave" in docs and "seg_null" in docs:
            j = docs["seg_up"]
            late = {r["metric"]: r for r in j["segments"]["rows"] if r["segment"] == "late"}
            c.check(j["metrics"]["loss"]["first_step_beyond"] is None and j["verdict"] == "FAIL"
                    and j["first_step_beyond"] == 42, "seg_up.json: inside the band step by step, FAIL by its segment")
            L = late["loss"]
            c.check(L["exceeds"] and abs(L["stat"] - math.log(2.2)) < 0.01 and L["scale"] == 0.18
                    and abs(L["effect"] - L["stat"] / 0.18) < 1e-9 and L["from_step"] == 42 and L["to_step"] == 59
                    and L["updates"] == 18 and len(L["null"]) == 1 and not late["grad_norm"]["exceeds"],
                    f"seg_up.json: the late loss row {L}")
            c.check(j["segments"]["limit"] == 4.0 and j["segments"]["judged"] and j["segments"]["floors"] == {"loss": 0.18, "grad_norm": 0.3}
                    and j["segments"]["pairs"] == [{"a": d("base"), "b": d("wave_twin"), "source": "base"}]
                    and [(r["segment"], r["metric"]) for r in j["segments"]["rows"]]
                    == [(sgm, m) for m in ("loss", "grad_norm") for sgm in ("early", "middle", "late")],
                    f"seg_up.json: segments {j['segments']['pairs']}")
            c.check(not any(r["exceeds"] for r in docs["seg_wave"]["segments"]["rows"])
                    and all(abs(r["effect"]) < 1 for r in docs["seg_wave"]["segments"]["rows"]),
                    "seg_wave.json: a wander both ways stays far inside")
            L = [r for r in docs["seg_null"]["segments"]["rows"] if r["segment"] == "late" and r["metric"] == "loss"][0]
            c.check(len(L["null"]) == 2 and abs(L["null"][1] - math.log(2.0)) < 1e-9
                    and abs(L["null_rms"] - math.sqrt((L["null"][0] ** 2 + math.log(2.0) ** 2) / 2)) < 1e-9
                    and L["scale"] == L["null_rms"]
                    and docs["seg_null"]["segments"]["pairs"][1]["source"] == "null" and not L["exceeds"],
                    f"seg_null.json: the --null pair joins the null: {L}")
        if "ranks" in docs:
            r = docs["ranks"]["ranks"]
            c.check(not r["cand"]["consistent"] and r["cand"]["inconsistent"][0]["step"] == 17
                    and not r["base"]["present"], "ranks.json: ranks check")

        # the PNG
        ok = res["plot"][0] == 0 and os.path.isfile(d("plot.png")) and os.path.getsize(d("plot.png")) > 10000
        with open(d("plot.png"), "rb") if os.path.isfile(d("plot.png")) else open(os.devnull, "rb") as f:
            ok = ok and f.read(8) == b"\x89PNG\r\n\x1a\n"
        c.check(ok, f"plot: no PNG written (exit {res['plot'][0]}: {res['plot'][2]})")
        c.check(res["plot_band"][0] == 0 and os.path.getsize(d("band.png")) > 10000,
                f"plot_band: exit {res['plot_band'][0]}: {res['plot_band'][2]}")
        c.check(res["plot_huge_tol"][0] == 0 and res["plot_huge_tol"][2] == "" and os.path.getsize(d("plot3.png")) > 10000,
                f"plot_huge_tol: exit {res['plot_huge_tol'][0]}, stderr {res['plot_huge_tol'][2]!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"test_reconcile: {c.count - len(c.failures)}/{c.count} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
