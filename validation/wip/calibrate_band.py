import sys, os, numpy as np
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
L = SourceFileLoader("r", "/tmp/rec/avtrain-reconcile.wip"); m = module_from_spec(spec_from_loader("r", L)); L.exec_module(m)
RT = {"loss": 0.1, "grad_norm": 0.1, "layer": 0.1, "val_loss": 0.1, "val_acc": 0.0, "first_loss": 0, "first_grad_norm": 0}
ZERO = {k: (0.0, 0.0) for k in m.METRICS}
def needed(bases, cand, floors):
    """single: needed atol at RT rtol; band: needed factor over floors"""
    B = [m.load_run(b) for b in bases]; C = m.load_run(cand)
    out = {}
    tol = {k: (0.0, RT[k]) for k in m.METRICS}
    a = m.analyze(B, C, tol, factor=0.0, first_steps=10)
    for k in ("loss", "grad_norm"):
        c = a["metrics"][k]
        d = np.abs(c["cand"] - c["center"])
        if len(B) == 1:
            out[k] = float(np.max(d - RT[k] * np.abs(c["center"])))
        else:
            fl = floors[k][0] + floors[k][1] * np.abs(c["center"])
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.where(d <= fl, 0, (d - fl) / c["half"])
            out[k] = float(np.max(f))
        fc = a["metrics"]["first_" + k]
        out["first_" + k] = float(np.max(fc["rel"]))
    # layers: recompute per layer
    worst = 0; wn = ""
    tabs = [m.layer_table(r, r["trace"]["step"][r["trace"]["skipped"] == 0][:200]) for r in B + [C]]
    for i, name in enumerate(tabs[0][0]):
        b = [t[1]["grad_norm"][t[0].index(name)] for t in tabs[:-1]]
        c = tabs[-1][1]["grad_norm"][tabs[-1][0].index(name)]
        n = min(len(c), *(len(x) for x in b)); b = [x[:n] for x in b]; c = c[:n]
        cc = m.compare(b, c, (0, 0), 0, 10)
        d = np.abs(cc["cand"] - cc["center"])
        if len(B) == 1:
            v = float(np.max(d - RT["layer"] * np.abs(cc["center"])))
        else:
            fl = floors["layer"][0] + floors["layer"][1] * np.abs(cc["center"])
            with np.errstate(divide="ignore", invalid="ignore"):
                v = float(np.max(np.where(d <= fl, 0, (d - fl) / cc["half"])))
        if v > worst: worst, wn = v, name
    out["layer"] = worst; out["layer_name"] = wn
    if a["end"]:
        out["val_loss"] = abs(a["end"]["val_loss"]["cand"] - a["end"]["val_loss"]["base"])
        out["val_acc"] = abs(a["end"]["val_acc"]["cand"] - a["end"]["val_acc"]["base"])
    return out
floors = {"loss": (float(sys.argv[1]), float(sys.argv[2])), "grad_norm": (float(sys.argv[3]), float(sys.argv[4])), "layer": (float(sys.argv[5]), float(sys.argv[6]))} if len(sys.argv) > 6 else None
for s in (1, 2, 3):
    for cand in ("fp32_u1", "fp32_u2", "bf16_u0", "fp16_u0"):
        cd = f"s{s}_{cand}"
        if not os.path.exists(cd + "/trace.csv") or len(open(cd + "/trace.csv").readlines()) < 201: continue
        single = needed([f"s{s}_fp32_u0"], cd, None)
        line = f"s{s} {cand:8} single(atol@rtol.1): " + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in single.items())
        print(line)
        if floors and cand != "fp32_u1":
            band = needed([f"s{s}_fp32_u0", f"s{s}_fp32_u1"], cd, floors)
            print(f"   band factor needed: loss={band['loss']:.3g} grad_norm={band['grad_norm']:.3g} layer={band['layer']:.3g} ({band['layer_name']})")
print("--- band {u0, u65536}")
for s in (1, 3):
    for cand in ("fp32_u2", "bf16_u0", "fp16_u0"):
        cd = f"s{s}_{cand}"
        if not os.path.exists(cd + "/trace.csv"): continue
        band = needed([f"s{s}_fp32_u0", f"s{s}_fp32_u65536"], cd, floors)
        print(f"s{s} {cand}: band factor needed: loss={band['loss']:.3g} grad_norm={band['grad_norm']:.3g} layer={band['layer']:.3g} ({band['layer_name']})  first: loss {band['first_loss']:.2g} gn {band['first_grad_norm']:.2g}")
