#!/usr/bin/python3
"""Tests avtrain-precision-plan's parts without training: the groups read from a dry run, the deck
fragment of each configuration (bf16 and fp8 targets: the levels are data), the margin of a report,
and the search (rank, raise in ranked order, the cheapest passing plan) on made-up verdicts."""
import importlib.machinery
import importlib.util
import os
import contextlib
import io
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("precision_plan", os.path.join(HERE, "avtrain-precision-plan"))
_spec = importlib.util.spec_from_loader("precision_plan", _loader)
pp = importlib.util.module_from_spec(_spec)
_loader.exec_module(pp)

DRY_RUN = """AVNet on 2 shard(s), 512 samples
layer                       module                        parameters
input                       audio.conv                          6208
input                       audio.bn                             128
input                       video.patch                         8256
input                       embed                               6208
blocks.0                    blocks.0.ln1                         128
blocks.0                    blocks.0.attn.qkv                  12480
blocks.1                    blocks.1.ln1                         128
blocks.1                    blocks.1.attn.qkv                  12480
head                        head.ln                              128
head                        head.cls                            2064
total trainable                                                48208

precision: fp32, products on OpenBLAS sgemm
stage  layers                    parameters  fwd GFLOP/mb      act MiB/mb  in flight    peak act MiB
0      input .. head                  48208         0.433           14.69          1           14.69
"""
FP32, BF16, FP8 = 0, 1, 2


def make_plan(levels):
    return pp.Plan(pp.read_groups(DRY_RUN), levels)


class Groups(unittest.TestCase):
    def test_read_in_model_order_with_parameters(self):
        plan = make_plan([FP32, BF16])
        self.assertEqual([g for g, _ in plan.groups], ["input", "blocks.0", "blocks.1", "head"])
        self.assertEqual(plan.params, [20800, 12608, 12608, 2192])

    def test_no_table_is_refused(self):
        with self.assertRaises(pp.Refusal):
            pp.read_groups("precision: fp32\n")

    def test_globs(self):
        groups = dict(pp.read_groups(DRY_RUN))
        self.assertEqual(pp.group_globs("blocks.1", groups["blocks.1"]), ["blocks.1.*"])
        self.assertEqual(pp.group_globs("input", groups["input"]), ["audio.conv", "audio.bn", "video.patch", "embed"])


class Fragments(unittest.TestCase):
    def test_bf16_target(self):
        plan = make_plan([FP32, BF16])
        self.assertEqual(plan.settings((BF16,) * 4), [("mode", "bf16")])
        self.assertEqual(plan.settings((BF16, FP32, BF16, FP32)),
                         [("mode", "bf16"), ("fp32_layers", "blocks.0.*,head.*")])
        self.assertEqual(plan.settings((FP32,) * 4), [("mode", "fp32")])
        self.assertEqual(plan.options((FP32, BF16, BF16, BF16)),
                         ["--precision.mode", "bf16", "--precision.fp32_layers", "audio.conv,audio.bn,video.patch,embed"])
        self.assertEqual(plan.fragment((BF16, BF16, BF16, FP32)), "[precision]\nmode = bf16\nfp32_layers = head.*\n")

    def test_fp8_target(self):
        plan = make_plan([FP32, BF16, FP8])
        self.assertEqual(plan.settings((FP8,) * 4), [("mode", "fp8")])
        # fp8_layers defaults to every linear: a group left at bf16 needs the others listed
        self.assertEqual(plan.settings((FP8, FP8, BF16, FP8)),
                         [("mode", "fp8"), ("fp8_layers", "audio.conv,audio.bn,video.patch,embed,blocks.0.*,head.*")])
        self.assertEqual(plan.settings((BF16, FP32, FP8, BF16)),
                         [("mode", "fp8"), ("fp32_layers", "blocks.0.*"), ("fp8_layers", "blocks.1.*")])
        self.assertEqual(plan.settings((BF16, FP32, BF16, BF16)), [("mode", "bf16"), ("fp32_layers", "blocks.0.*")])

    def test_cheapest_first(self):
        plan = make_plan([FP32, BF16])
        # more parameters at bf16 is cheaper: head (2192) in fp32 beats blocks.0 (12608)
        self.assertGreater(plan.cost_key((BF16, BF16, BF16, FP32)), plan.cost_key((BF16, FP32, BF16, BF16)))
        self.assertGreater(plan.cost_key((BF16,) * 4), plan.cost_key((BF16, BF16, BF16, FP32)))


class DeckSteps(unittest.TestCase):
    """The verification's steps for the cost line: the options' last --steps, else the deck's."""

    def steps(self, deck, extra=()):
        import types
        return pp.deck_steps(types.SimpleNamespace(deck=os.path.join(os.path.dirname(HERE), "inputs", deck),
                                                   extra=list(extra)))

    def test_deck_then_options(self):
        self.assertEqual(self.steps("ci.ini"), 40)
        self.assertEqual(self.steps("quickstart.ini"), 300)
        self.assertEqual(self.steps("ci.ini", ["--steps", "7", "--train.steps", "9"]), 9)
        self.assertEqual(self.steps("ci.ini", ["--train.steps=11"]), 11)
        self.assertIsNone(self.steps("no-such-deck.ini"))


def report(metric_worst, layers=(), end_ratio=0.0, effects=(), limit=4.0, judged=True):
    return {"metrics": {"loss": {"worst": metric_worst}},
            "layers": [{"name": n, "worst": w} for n, w in layers],
            "end": {"steps": [1, 1], "val_loss": {"ratio": end_ratio}},
            "segments": {"judged": judged, "limit": limit, "rows": [{"effect": e} for e in effects]}}


class Margin(unittest.TestCase):
    def test_largest_of_every_part(self):
        self.assertEqual(pp.margin(report(0.5, [("a", 0.7)], 0.2, [-2.0])), 0.7)
        self.assertEqual(pp.margin(report(0.5, [("a", 0.7)], 0.2, [-6.0])), 1.5)
        self.assertEqual(pp.margin(report(0.5, [], 1.2)), 1.2)
        self.assertEqual(pp.margin(report(0.5, [], 0.0, [-6.0], judged=False)), 0.5)
        self.assertEqual(pp.margin(report(None)), float("inf"))

    def test_group_layer_worst(self):
        j = report(0.1, [("blocks.1.ln1", 0.3), ("blocks.1.attn.qkv", 2.0), ("head.cls", 5.0)])
        groups = dict(pp.read_groups(DRY_RUN))
        self.assertEqual(pp.group_layer_worst(j, groups["blocks.1"]), 2.0)


class FakeStudy:
    """Verdicts from a rule instead of runs: `needs[g]` is the dearest level group g must reach;
    the margin grows by one for each group short of it."""

    def __init__(self, needs):
        self.needs, self.results, self.trained = needs, {}, []

    def judge(self, config):
        config = tuple(config)
        if config not in self.results:
            self.trained.append(config)
            short = sum(1 for lv, need in zip(config, self.needs) if lv > need)
            layers = [(f"blocks.{g}.ln1", 3.0 if config[g] > need else 0.1) for g, need in enumerate(self.needs)]
            self.results[config] = ("PASS" if short == 0 else "FAIL", 0.5 + short, report(0.5 + short, layers))
        return self.results[config]


class Search(unittest.TestCase):
    def search(self, levels, needs):
        plan = make_plan(levels)
        study = FakeStudy(needs)
        target = (levels[-1],) * len(plan.groups)
        with contextlib.redirect_stdout(io.StringIO()):
            ranking, best = pp.search(plan, study, target)
        return plan, study, ranking, best

    def test_target_passes_one_run(self):
        _, study, ranking, best = self.search([FP32, BF16], [BF16] * 4)
        self.assertEqual((ranking, best, len(study.trained)), ([], (BF16,) * 4, 1))

    def test_one_sensitive_group_is_raised_alone(self):
        plan, study, ranking, best = self.search([FP32, BF16], [BF16, BF16, FP32, BF16])
        self.assertEqual(best, (BF16, BF16, FP32, BF16))
        self.assertEqual(plan.groups[ranking[0][0]][0], "blocks.1")
        self.assertEqual(len(study.trained), 5)

    def test_two_sensitive_groups_raised_in_ranked_order(self):
        plan, study, ranking, best = self.search([FP32, BF16], [BF16, FP32, BF16, FP32])
        self.assertEqual(best, (BF16, FP32, BF16, FP32))
        # ties in margin go to the worse layers at the target, then to fewer parameters: head first
        self.assertEqual([plan.groups[g][0] for g, _, _ in ranking[:2]], ["head", "blocks.0"])
        self.assertEqual(len(study.trained), 1 + 4 + 1)

    def test_fp8_target_raises_to_bf16_then_fp32(self):
        plan, study, ranking, best = self.search([FP32, BF16, FP8], [FP8, BF16, FP32, FP8])
        # raised in ranked order to bf16, then to fp32 until it passes, then lowered again: exactly the needs
        self.assertEqual(best, (FP8, BF16, FP32, FP8))

    def test_nothing_passes_is_refused(self):
        plan = make_plan([FP32, BF16])
        study = FakeStudy([-1] * 4)  # no level is enough
        with self.assertRaises(pp.Refusal), contextlib.redirect_stdout(io.StringIO()):
            pp.search(plan, study, (BF16,) * 4)


if __name__ == "__main__":
    unittest.main()
