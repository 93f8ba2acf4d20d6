#!/usr/bin/python3
"""AVNet in PyTorch, written from docs/model.md: a timing baseline and an independent reference.

Parameter names and shapes are those of avtrain (`audio.conv.weight` [D, mel_bins*3],
`blocks.0.attn.qkv.weight` [3D, D], ...), so parameters and gradients can be exchanged by name: the
module names of this file are the name map of avtrain's safetensors files (docs/safetensors.md), and
the tests load them with load_state_dict(strict=True) both ways.

Modes:
  bench      time full training steps (zero_grad, forward, backward, clip, AdamW step) on random
             full-length inputs; prints one JSON line.
  reference  load parameters and one micro-batch from HDF5, run one train-mode forward and the
             backward of the total loss in float64, write loss terms, logits and gradients to HDF5.
  evaluate   load an avtrain checkpoint (OUT/checkpoints/step-NNNNNNN), or the safetensors file
             avtrain-export wrote of it (--safetensors), by name, with the model and data shapes its
             fingerprint records, and compute in float64 the validation loss and accuracy over the
             samples avtrain --eval-only evaluated (eval.json's val_indices), read from the shards
             with h5py; compare with eval.json (exit 1 beyond 1e-5 relative, or when more samples are
             classed otherwise than near ties, top two logits within 1e-4, can explain).

Run with Debian's interpreter (/usr/bin/python3), which has torch, numpy and h5py (bench needs no h5py:
`bench --device cuda` is gpu-check's PyTorch peer on GPU nodes, which have torch but often no h5py).
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np
try:
    import h5py
except ImportError:  # bench needs none: GPU nodes have torch, often no h5py
    h5py = None
import torch
import torch.nn.functional as F
from torch import nn

import avtrain_checkpoint  # beside this file: a checkpoint directory read by name


@dataclass
class AVNetConfig:
    # data shape (from the shard set)
    audio_samples: int
    sample_rate: int
    frames: int
    height: int
    width_px: int
    channels: int
    num_classes: int
    # architecture ([model] keys)
    width: int = 128
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    audio_window: int = 256
    audio_hop: int = 128
    mel_bins: int = 64
    tubelet_frames: int = 2
    patch: int = 8
    nce_weight: float = 0.1
    nce_temperature: float = 0.1
    ce_weight: float = 1.0
    # "single_label": softmax cross-entropy with `label`; "multi_label": sigmoid binary cross-entropy
    # (BCEWithLogitsLoss, the mean over clips and classes) with the multi-hot sets (docs/metrics.md)
    task: str = "single_label"
    init_std: float = 0.02
    # how attention is computed (not part of the architecture): False, the explicit scores, softmax and
    # product (the seed recipe); True, torch's fused scaled_dot_product_attention with the same mask
    sdpa: bool = False

    @property
    def audio_frames(self):
        return 1 + (self.audio_samples - self.audio_window) // self.audio_hop

    @property
    def audio_tokens(self):
        return (self.audio_frames - 1) // 2 + 1

    @property
    def video_tokens_per_tubelet_step(self):
        return (self.height // self.patch) * (self.width_px // self.patch)

    @property
    def video_tokens(self):
        return (self.frames // self.tubelet_frames) * self.video_tokens_per_tubelet_step

    @property
    def tokens(self):
        return self.audio_tokens + self.video_tokens

    def validate(self):
        checks = [
            (self.audio_samples >= self.audio_window, "audio_samples must be >= audio_window"),
            (self.audio_window % 2 == 0, "audio_window must be even"),
            (self.width % self.heads == 0, "width must be divisible by heads"),
            (self.frames % self.tubelet_frames == 0, "frames must be divisible by tubelet_frames"),
            (self.height % self.patch == 0 and self.width_px % self.patch == 0,
             "height and width must be divisible by patch"),
            (self.task in ("single_label", "multi_label"), "task must be single_label or multi_label"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# ----------------------------------------------------------------------------------------------
# Front-end constants (computed in float64; cast to the activation dtype on use)

def periodic_hann_window(win):
    i = torch.arange(win, dtype=torch.float64)
    return 0.5 - 0.5 * torch.cos(2.0 * math.pi * i / win)


def dft_cos_minus_sin_matrix(win):
    """[win, 2*(win/2+1)]: columns cos(2 pi i k / win) then -sin(2 pi i k / win), k = 0..win/2."""
    i = torch.arange(win, dtype=torch.int64)[:, None]
    k = torch.arange(win // 2 + 1, dtype=torch.int64)[None, :]
    phase = 2.0 * math.pi * ((i * k) % win).to(torch.float64) / win
    return torch.cat([torch.cos(phase), -torch.sin(phase)], dim=1)


def hz_to_mel_htk(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_to_hz_htk(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def htk_mel_filterbank(win, mel_bins, sample_rate):
    """[win/2+1, mel_bins] triangles, not area-normalised (torchaudio norm=None, mel_scale='htk')."""
    top = hz_to_mel_htk(sample_rate / 2.0)
    edges = torch.tensor([mel_to_hz_htk(top * m / (mel_bins + 1)) for m in range(mel_bins + 2)],
                         dtype=torch.float64)
    freqs = torch.arange(win // 2 + 1, dtype=torch.float64)[:, None] * sample_rate / win
    lo, mid, hi = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    up = (freqs - lo) / (mid - lo)
    down = (hi - freqs) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def valid_audio_frames(audio_len, win, hop):
    """Frames lying wholly inside audio_len (at least one)."""
    return torch.where(audio_len >= win, 1 + torch.div(audio_len - win, hop, rounding_mode="floor"),
                       torch.ones_like(audio_len))


def valid_audio_tokens(audio_len, win, hop):
    return torch.div(valid_audio_frames(audio_len, win, hop) - 1, 2, rounding_mode="floor") + 1


def valid_video_tokens(video_len, tubelet_frames, tokens_per_tubelet_step):
    tubelet_steps = torch.div(video_len + tubelet_frames - 1, tubelet_frames, rounding_mode="floor")
    return tubelet_steps * tokens_per_tubelet_step


def prefix_mask(valid_count, length):
    """[B, length] bool: position < valid_count[b]."""
    return torch.arange(length, device=valid_count.device)[None, :] < valid_count[:, None]


# ----------------------------------------------------------------------------------------------
# Modules

class LogMelFrontend(nn.Module):
    """audio [B, A] -> log-mel [B, Tf, mel_bins]; frames not wholly inside audio_len are 0."""

    def __init__(self, cfg):
        super().__init__()
        self.win, self.hop = cfg.audio_window, cfg.audio_hop
        self.register_buffer("window", periodic_hann_window(self.win), persistent=False)
        self.register_buffer("dft", dft_cos_minus_sin_matrix(self.win), persistent=False)
        self.register_buffer("filterbank", htk_mel_filterbank(self.win, cfg.mel_bins, cfg.sample_rate),
                             persistent=False)

    def forward(self, audio, audio_len):
        dtype = audio.dtype
        frames = audio.unfold(1, self.win, self.hop) * self.window.to(dtype)
        spectrum = frames @ self.dft.to(dtype)
        bins = self.win // 2 + 1
        power = spectrum[..., :bins] ** 2 + spectrum[..., bins:] ** 2
        logmel = torch.log(power @ self.filterbank.to(dtype) + 1e-6)
        frame_valid = prefix_mask(valid_audio_frames(audio_len, self.win, self.hop), logmel.shape[1])
        return torch.where(frame_valid[..., None], logmel, torch.zeros_like(logmel))


class FlatConv1d(nn.Module):
    """Conv1d whose weight is stored flattened as [out, in*k] in (in, k) order."""

    def __init__(self, in_channels, out_channels, kernel, stride, padding):
        super().__init__()
        self.in_channels, self.kernel, self.stride, self.padding = in_channels, kernel, stride, padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels * kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x):
        """x [B, T, in] (channels last) -> [B, T', out]."""
        weight = self.weight.view(-1, self.in_channels, self.kernel)
        y = F.conv1d(x.transpose(1, 2), weight, self.bias, stride=self.stride, padding=self.padding)
        return y.transpose(1, 2)


class MaskedBatchNorm(nn.Module):
    """BatchNorm over channels whose batch statistics use the valid tokens only; padded tokens -> 0."""

    def __init__(self, channels, eps=1e-5, momentum=0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x, mask):
        """x [B, T, C], mask [B, T] bool."""
        x = x.to(self.weight.dtype)
        m = mask[..., None].to(x.dtype)
        if self.training:
            count = m.sum()
            mean = (x * m).sum(dim=(0, 1)) / count
            var = (((x - mean) ** 2) * m).sum(dim=(0, 1)) / count
            self.update_running_statistics(mean, var, count)
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
        return y * m

    @torch.no_grad()
    def update_running_statistics(self, mean, biased_var, count):
        unbiased_var = biased_var * count / (count - 1)
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
        self.running_var.lerp_(unbiased_var.to(self.running_var.dtype), self.momentum)


class AudioStem(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.frontend = LogMelFrontend(cfg)
        self.conv = FlatConv1d(cfg.mel_bins, cfg.width, kernel=3, stride=2, padding=1)
        self.bn = MaskedBatchNorm(cfg.width)

    def forward(self, audio, token_mask, audio_len):
        with torch.autocast(audio.device.type, enabled=False):
            logmel = self.frontend(audio, audio_len)
        return F.gelu(self.bn(self.conv(logmel), token_mask))


def video_to_tubelets(video, t, p):
    """uint8 [B, F, H, W, C] -> [B, Nv, t*p*p*C], tokens in (time, row, col), vectors in (dt, dy, dx, c)."""
    B, Fr, H, W, C = video.shape
    x = video.view(B, Fr // t, t, H // p, p, W // p, p, C)
    x = x.permute(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(B, (Fr // t) * (H // p) * (W // p), t * p * p * C)


class VideoStem(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.t, self.p = cfg.tubelet_frames, cfg.patch
        self.patch = nn.Linear(cfg.tubelet_frames * cfg.patch * cfg.patch * cfg.channels, cfg.width)

    def forward(self, video, token_mask):
        tubelets = video_to_tubelets(video, self.t, self.p).to(self.patch.weight.dtype) / 127.5 - 1.0
        return self.patch(tubelets) * token_mask[..., None]


class TokenEmbedding(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pos = nn.Parameter(torch.empty(cfg.tokens, cfg.width))
        self.modality = nn.Parameter(torch.empty(2, cfg.width))

    def forward(self, audio_tokens, video_tokens):
        x = torch.cat([audio_tokens + self.modality[0], video_tokens + self.modality[1]], dim=1)
        return x + self.pos


class MaskedSelfAttention(nn.Module):
    def __init__(self, width, heads, sdpa=False):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x, key_mask):
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:  # boolean mask: True where a key takes part
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
            return self.proj(out.transpose(1, 2).reshape(B, L, D))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.heads)
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(B, L, D))


class MLP(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.width, eps=1e-5)
        self.attn = MaskedSelfAttention(cfg.width, cfg.heads, cfg.sdpa)
        self.ln2 = nn.LayerNorm(cfg.width, eps=1e-5)
        self.mlp = MLP(cfg.width, cfg.mlp_ratio * cfg.width)

    def forward(self, x, key_mask):
        h = x + self.attn(self.ln1(x), key_mask)
        return h + self.mlp(self.ln2(h))


def masked_mean(x, mask):
    """x [B, T, D], mask [B, T] -> [B, D] mean over the valid tokens."""
    m = mask[..., None].to(x.dtype)
    return (x * m).sum(dim=1) / m.sum(dim=1)


def l2_normalise(x):
    return x / (x.norm(dim=1, keepdim=True) + 1e-12)


def label_targets(batch, num_classes):
    """[B, classes] 0/1: the batch's sets of classes (`labels`, format v2), else the one-hot of `label`."""
    if "labels" in batch:
        return batch["labels"]
    return F.one_hot(batch["label"].long(), num_classes)


def symmetric_info_nce(pa, pv, temperature):
    similarity = l2_normalise(pa) @ l2_normalise(pv).t() / temperature
    target = torch.arange(pa.shape[0], device=pa.device)
    return 0.5 * (F.cross_entropy(similarity, target) + F.cross_entropy(similarity.t(), target))


class Head(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.audio_tokens = cfg.audio_tokens
        self.ln = nn.LayerNorm(cfg.width, eps=1e-5)
        self.cls = nn.Linear(2 * cfg.width, cfg.num_classes)

    def forward(self, x, audio_mask, video_mask):
        """Returns logits [B, classes] and the pooled audio / video vectors [B, D]."""
        x = self.ln(x)
        pa = masked_mean(x[:, :self.audio_tokens], audio_mask)
        pv = masked_mean(x[:, self.audio_tokens:], video_mask)
        return self.cls(torch.cat([pa, pv], dim=1)), pa, pv


class AVNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.audio = AudioStem(cfg)
        self.video = VideoStem(cfg)
        self.embed = TokenEmbedding(cfg)
        self.blocks = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.depth))
        self.head = Head(cfg)
        self.initialise_parameters()

    @torch.no_grad()
    def initialise_parameters(self):
        """docs/model.md: weights and embeddings normal(0, init_std), attn.proj / mlp.fc2 weights
        init_std / sqrt(2 depth), biases 0, norm weights 1 (not the keyed stream of avtrain)."""
        residual_std = self.cfg.init_std / math.sqrt(2 * self.cfg.depth)
        for name, p in self.named_parameters():
            if is_norm_parameter(name) and name.endswith(".weight"):
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, 0.0, residual_std)
            else:
                nn.init.normal_(p, 0.0, self.cfg.init_std)

    def token_masks(self, audio_len, video_len):
        cfg = self.cfg
        audio_mask = prefix_mask(valid_audio_tokens(audio_len, cfg.audio_window, cfg.audio_hop), cfg.audio_tokens)
        video_mask = prefix_mask(valid_video_tokens(video_len, cfg.tubelet_frames, cfg.video_tokens_per_tubelet_step),
                                 cfg.video_tokens)
        return audio_mask, video_mask

    def forward(self, batch):
        """batch: audio [B, A] float, audio_len [B], video uint8 [B, F, H, W, C], video_len [B], label [B] or
        labels [B, classes] (format v2 sets). Returns (loss, ce_loss, nce_loss, logits); ce_loss is the
        classification term: the cross-entropy, or under task multi_label the binary cross-entropy."""
        audio_mask, video_mask = self.token_masks(batch["audio_len"], batch["video_len"])
        audio_tokens = self.audio(batch["audio"], audio_mask, batch["audio_len"])
        video_tokens = self.video(batch["video"], video_mask)
        x = self.embed(audio_tokens, video_tokens)
        key_mask = torch.cat([audio_mask, video_mask], dim=1)
        for block in self.blocks:
            x = block(x, key_mask)
        logits, pa, pv = self.head(x, audio_mask, video_mask)
        ce_loss = self.classification_loss(logits, batch)
        nce_loss = symmetric_info_nce(pa, pv, self.cfg.nce_temperature)
        loss = self.cfg.ce_weight * ce_loss + self.cfg.nce_weight * nce_loss
        return loss, ce_loss, nce_loss, logits

    def classification_loss(self, logits, batch):
        if self.cfg.task == "multi_label":
            targets = label_targets(batch, self.cfg.num_classes).to(logits.dtype)
            return F.binary_cross_entropy_with_logits(logits, targets)
        return F.cross_entropy(logits, batch["label"].long())


# ----------------------------------------------------------------------------------------------
# Optimiser

def is_norm_parameter(name):
    module = name.rsplit(".", 2)[-2]
    return module in ("ln1", "ln2", "ln", "bn")


def make_adamw(model, lr, weight_decay=0.05):
    """AdamW as avtrain: betas (0.9, 0.95), eps 1e-8, no decay on norm parameters and biases."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_norm_parameter(name) or name.endswith(".bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def training_step(model, optimiser, batch, clip_norm, autocast_dtype=None):
    optimiser.zero_grad(set_to_none=True)
    device = next(model.parameters()).device.type
    autocast = torch.autocast(device, dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    with autocast:
        loss, _, _, _ = model(batch)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimiser.step()
    return loss.detach(), grad_norm


# ----------------------------------------------------------------------------------------------
# Modes

def random_full_length_batch(cfg, batch_size, generator):
    B = batch_size
    return {
        "audio": torch.rand(B, cfg.audio_samples, generator=generator) * 2.0 - 1.0,
        "audio_len": torch.full((B,), cfg.audio_samples, dtype=torch.int32),
        "video": torch.randint(0, 256, (B, cfg.frames, cfg.height, cfg.width_px, cfg.channels),
                               generator=generator, dtype=torch.uint8),
        "video_len": torch.full((B,), cfg.frames, dtype=torch.int32),
        "label": torch.randint(0, cfg.num_classes, (B,), generator=generator, dtype=torch.int64),
    }


def run_bench(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = config_from_args(args, audio_samples=args.audio_samples, sample_rate=args.sample_rate, frames=args.frames,
                           height=args.height, width_px=args.width_px, channels=args.channels,
                           num_classes=args.classes)
    cfg.sdpa = args.attention == "sdpa"
    if cfg.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"torch_avnet.py bench: --attention sdpa needs torch 2.0 or later (this is {torch.__version__})")
    device = torch.device(args.device)
    # FP32 stays FP32 on a GPU too (avtrain's products take TF32 only under --allow-tf32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = AVNet(cfg).to(device).train()
    optimiser = make_adamw(model, lr=args.lr, weight_decay=args.weight_decay)
    batch = random_full_length_batch(cfg, args.batch, torch.Generator().manual_seed(args.seed))
    batch = {k: v.to(device) for k, v in batch.items()}
    autocast_dtype = torch.bfloat16 if args.autocast == "bf16" else None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step_ms = []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        training_step(model, optimiser, batch, args.clip_norm, autocast_dtype)
        sync()
        if step >= args.warmup:
            step_ms.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({
        "framework": "pytorch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": "bf16-autocast" if autocast_dtype is not None else "fp32",
        "attention": args.attention,
        "median_step_ms": round(statistics.median(step_ms), 3),
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": args.batch,
        "steps": args.steps,
        "threads": args.threads,
    }))


def read_scalar_attribute(f, name):
    value = f.attrs[name]
    return value.item() if hasattr(value, "item") else value


def batch_from_arrays(audio, audio_len, video, video_len, label=None, labels=None):
    """A batch of tensors from a shard's arrays (int16 audio divided by 32768); `labels` [B, classes] for a v2
    set (format v2 has no /label: `label` is then the first class of each set, as avtrain's MicroBatch)."""
    if audio.dtype == np.int16:
        audio = audio.astype(np.float32) / 32768.0
    batch = {"audio": torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
             "audio_len": torch.from_numpy(np.asarray(audio_len).astype(np.int64)),
             "video": torch.from_numpy(np.ascontiguousarray(video, dtype=np.uint8)),
             "video_len": torch.from_numpy(np.asarray(video_len).astype(np.int64))}
    if labels is not None:
        labels = np.ascontiguousarray(labels, dtype=np.uint8)
        batch["labels"] = torch.from_numpy(labels)
        batch["label"] = torch.from_numpy(labels.argmax(axis=1).astype(np.int64))
    else:
        batch["label"] = torch.from_numpy(np.asarray(label).astype(np.int64))
    return batch


def load_micro_batch(path):
    with h5py.File(path, "r") as f:
        batch = batch_from_arrays(f["audio"][...], f["audio_len"][...], f["video"][...], f["video_len"][...],
                                  label=f["label"][...] if "label" in f else None,
                                  labels=f["labels"][...] if "labels" in f else None)
        sample_rate = int(read_scalar_attribute(f, "sample_rate"))
        num_classes = int(read_scalar_attribute(f, "num_classes"))
    return batch, sample_rate, num_classes


def load_parameters(model, path):
    """Parameters by name (required); BN running statistics if present."""
    parameter_names = {name for name, _ in model.named_parameters()}
    with h5py.File(path, "r") as f:
        for name, tensor in model.state_dict().items():
            if name not in f:
                if name in parameter_names:
                    raise KeyError(f"{path}: no dataset for parameter {name}")
                continue
            value = torch.from_numpy(f[name][...])
            if tuple(value.shape) != tuple(tensor.shape):
                raise ValueError(f"{path}: {name} has shape {list(value.shape)}, expected {list(tensor.shape)}")
            tensor.copy_(value)


def load_checkpoint(model, checkpoint):
    """Every parameter and buffer of the model (BatchNorm's running statistics included) from an
    avtrain checkpoint directory, by name (/params/NAME), whichever of its files hold it, whole or
    in ZeRO replicas' pieces (validation/avtrain_checkpoint.py)."""
    held = avtrain_checkpoint.tensors(checkpoint)
    for name, tensor in model.state_dict().items():
        if f"params/{name}" not in held:
            raise KeyError(f"{checkpoint}: no file of it holds params/{name}")
        value = torch.from_numpy(held[f"params/{name}"])
        if tuple(value.shape) != tuple(tensor.shape):
            raise ValueError(f"{checkpoint}: params/{name} has shape {list(value.shape)}, expected "
                             f"{list(tensor.shape)}")
        tensor.copy_(value)


def model_from_fingerprint(fp):
    m, d = fp["model"], fp["data"]
    frames, height, width_px, channels = d["video_shape"]
    cfg = AVNetConfig(audio_samples=d["audio_samples"], sample_rate=d["sample_rate"], frames=frames, height=height,
                      width_px=width_px, channels=channels, num_classes=d["num_classes"], width=m["width"],
                      depth=m["depth"], heads=m["heads"], mlp_ratio=m["mlp_ratio"], audio_window=m["audio_window"],
                      audio_hop=m["audio_hop"], mel_bins=m["mel_bins"], tubelet_frames=m["tubelet_frames"],
                      patch=m["patch"], nce_weight=m["nce_weight"], nce_temperature=m["nce_temperature"],
                      init_std=m["init_std"])
    return AVNet(cfg)


SAMPLE_DATASETS = ("audio", "audio_len", "video", "video_len")


def read_samples(shard_dir, shards, indices):
    """The samples of the global indices (shards in the fingerprint's order), as a batch."""
    starts = np.cumsum([0] + [s["samples"] for s in shards])
    parts = {k: [] for k in SAMPLE_DATASETS + ("label", "labels")}
    for i in indices:
        k = int(np.searchsorted(starts, i, side="right") - 1)
        with h5py.File(os.path.join(shard_dir, shards[k]["name"]), "r") as f:
            row = i - int(starts[k])
            for key in parts:
                if key in f:
                    parts[key].append(f[key][row])
    return batch_from_arrays(*(np.stack(parts[k]) for k in SAMPLE_DATASETS),
                             label=np.array(parts["label"]) if parts["label"] else None,
                             labels=np.stack(parts["labels"]) if parts["labels"] else None)


class ShardSet:
    """A shard directory held in memory (each file read whole on first use), its samples by global
    index: files in name order, as avtrain numbers them (docs/shard-format.md)."""

    def __init__(self, shard_dir):
        self.dir = shard_dir
        self.names = sorted(n for n in os.listdir(shard_dir) if n.endswith(".h5"))
        if not self.names:
            raise SystemExit(f"{shard_dir}: no .h5 shard")
        self.samples, self.arrays = [], {}
        with h5py.File(os.path.join(shard_dir, self.names[0]), "r") as f:
            self.attrs = {k: (f.attrs[k] if np.size(f.attrs[k]) != 1 else read_scalar_attribute(f, k)) for k in f.attrs}
            self.multi_label = "labels" in f
            self.audio_shape, self.video_shape = f["audio"].shape[1:], f["video"].shape[1:]
            self.audio_int16 = f["audio"].dtype == np.int16
        for name in self.names:
            with h5py.File(os.path.join(shard_dir, name), "r") as f:
                self.samples.append(int(f["audio_len"].shape[0]))
        self.starts = np.cumsum([0] + self.samples)
        self.num_classes = int(self.attrs["num_classes"])

    @property
    def total(self):
        return int(self.starts[-1])

    def _file(self, k):
        if k not in self.arrays:
            with h5py.File(os.path.join(self.dir, self.names[k]), "r") as f:
                self.arrays[k] = {key: f[key][...] for key in SAMPLE_DATASETS + ("label", "labels") if key in f}
        return self.arrays[k]

    def label_sets(self, indices):
        """Each sample's classes (v1: its one label)."""
        out = []
        for i in indices:
            k = int(np.searchsorted(self.starts, i, side="right") - 1)
            a = self._file(k)
            row = i - int(self.starts[k])
            out.append([int(c) for c in np.nonzero(a["labels"][row])[0]] if "labels" in a else [int(a["label"][row])])
        return out

    def batch(self, indices):
        rows = {key: [] for key in SAMPLE_DATASETS + ("label", "labels")}
        for i in indices:
            k = int(np.searchsorted(self.starts, i, side="right") - 1)
            a = self._file(k)
            for key, values in a.items():
                rows[key].append(values[i - int(self.starts[k])])
        return batch_from_arrays(*(np.stack(rows[k]) for k in SAMPLE_DATASETS),
                                 label=np.array(rows["label"]) if rows["label"] else None,
                                 labels=np.stack(rows["labels"]) if rows["labels"] else None)


def load_safetensors(path):
    """A model from a safetensors file avtrain-export wrote (docs/safetensors.md): its shapes from the
    fingerprint in the file's metadata, every tensor by name through safetensors.torch.load_file
    (load_state_dict strict: the file's names are exactly the module's). Needs the safetensors package."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    if "avtrain.fingerprint" not in metadata:
        raise SystemExit(f"{path}: no avtrain.fingerprint in its metadata (not written by avtrain-export)")
    fp = json.loads(metadata["avtrain.fingerprint"])
    model = model_from_fingerprint(fp)
    model.load_state_dict({k: v.float() for k, v in load_file(path).items()}, strict=True)
    return model, fp


@torch.no_grad()
def run_evaluate(args):
    torch.set_num_threads(args.threads)
    if args.safetensors:
        model, fp = load_safetensors(args.safetensors)
    else:
        fp = avtrain_checkpoint.fingerprint(args.checkpoint)
        model = model_from_fingerprint(fp)
        load_checkpoint(model, args.checkpoint)
    model.double().eval()
    with open(args.eval_json) as f:
        ours = json.load(f)
    indices = ours["val_indices"]
    ce_sum, correct, near_ties = 0.0, 0, 0
    for begin in range(0, len(indices), args.batch):
        batch = read_samples(args.data, fp["data"]["shards"], indices[begin:begin + args.batch])
        batch["audio"] = batch["audio"].double()
        _, ce_loss, _, logits = model(batch)
        ce_sum += ce_loss.item() * len(batch["label"])
        correct += int((logits.argmax(dim=1) == batch["label"]).sum())
        # A sample whose two largest logits lie within fp32's reach of each other may be classed
        # otherwise by avtrain's fp32 run: the only way the accuracies may differ.
        top2 = logits.topk(2, dim=1).values
        near_ties += int(((top2[:, 0] - top2[:, 1]).abs() <= 1e-4 * top2[:, 0].abs().clamp(min=1.0)).sum())
    loss, acc = ce_sum / len(indices), correct / len(indices)
    rel = abs(loss - ours["val_loss"]) / abs(loss)
    print(json.dumps({"checkpoint": args.safetensors or args.checkpoint, "samples": len(indices), "torch_val_loss": loss,
                      "avtrain_val_loss": ours["val_loss"], "relative_difference": rel, "torch_val_acc": acc,
                      "avtrain_val_acc": ours["val_acc"], "near_ties": near_ties}))
    if not rel <= 1e-5:
        raise SystemExit(f"torch_avnet evaluate: val_loss {loss!r} (float64) against avtrain's {ours['val_loss']!r}: "
                         f"relative difference {rel:.3g} > 1e-5")
    if abs(acc - ours["val_acc"]) * len(indices) > near_ties + 1e-9:
        raise SystemExit(f"torch_avnet evaluate: val_acc {acc!r} (float64) against avtrain's {ours['val_acc']!r}: "
                         f"{abs(acc - ours['val_acc']) * len(indices):.0f} sample(s) classed otherwise, "
                         f"{near_ties} near tie(s) to explain them")


def reference_gradients(model, batch):
    """One train-mode forward in float64 and the backward of the total loss."""
    model.double().train()
    model.zero_grad(set_to_none=True)
    batch = dict(batch, audio=batch["audio"].double())
    loss, ce_loss, nce_loss, logits = model(batch)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return loss.item(), ce_loss.item(), nce_loss.item(), logits.detach(), grads


def write_reference(path, loss, ce_loss, nce_loss, logits, grads):
    with h5py.File(path, "w") as f:
        f.attrs["loss"] = np.float64(loss)
        f.attrs["ce_loss"] = np.float64(ce_loss)
        f.attrs["nce_loss"] = np.float64(nce_loss)
        f.create_dataset("logits", data=logits.numpy().astype(np.float64))
        for name, g in grads.items():
            f.create_dataset(f"grad/{name}", data=g.numpy().astype(np.float64))


def build_reference_model(args, batch, sample_rate, num_classes):
    _, F_, H, W, C = batch["video"].shape
    cfg = config_from_args(args, audio_samples=batch["audio"].shape[1], sample_rate=sample_rate, frames=F_,
                           height=H, width_px=W, channels=C, num_classes=num_classes)
    return AVNet(cfg)


def run_reference(args):
    torch.set_num_threads(args.threads)
    batch, sample_rate, num_classes = load_micro_batch(args.batch_file)
    model = build_reference_model(args, batch, sample_rate, num_classes)
    load_parameters(model, args.params)
    loss, ce_loss, nce_loss, logits, grads = reference_gradients(model, batch)
    write_reference(args.out, loss, ce_loss, nce_loss, logits, grads)
    print(json.dumps({"loss": loss, "ce_loss": ce_loss, "nce_loss": nce_loss, "out": args.out}))


# ----------------------------------------------------------------------------------------------
# Training on shards, as avtrain trains (modes init and train)

# avtrain's options that the peer reads, with avtrain's defaults (src/app/options.cpp). The [model] keys
# are all of avtrain's: avtrain-reconcile compares every model.* key of the two runs.
PEER_DEFAULTS = {
    "model.width": 128, "model.depth": 4, "model.heads": 4, "model.mlp_ratio": 4, "model.audio_window": 256,
    "model.audio_hop": 128, "model.mel_bins": 64, "model.tubelet_frames": 2, "model.patch": 8,
    "model.nce_temperature": 0.1, "model.nce_weight": 0.1, "model.ce_weight": 1.0, "model.task": "single_label",
    "model.init_std": 0.02, "model.init_from": "", "model.init_skip": "",
    "optim.lr": 2e-3, "optim.min_lr": 2e-4, "optim.warmup_steps": 50, "optim.weight_decay": 0.05,
    "optim.beta1": 0.9, "optim.beta2": 0.95, "optim.eps": 1e-8, "optim.clip_norm": 1.0,
    "data.dir": "", "data.val_dir": "", "data.val_fraction": 0.1, "data.sampling": "uniform",
    "data.clip_seconds": 0.0,
    "augment.crop_scale": 1.0, "augment.flip": False, "augment.freq_masks": 0, "augment.time_masks": 0,
    "augment.mixup": 0.0,
    "precision.mode": "fp32",
    "train.steps": 1000, "train.micro_batch": 8, "train.micro_batches": 1, "train.seed": 1,
    "train.eval_interval": 100, "train.init_ulps": 0, "train.threads": 1, "train.out": "",
}
# What the peer does not do; a run that asks for it is refused rather than trained otherwise.
PEER_REFUSES = {"data.clip_seconds": 0.0, "augment.crop_scale": 1.0, "augment.flip": False, "augment.freq_masks": 0,
                "augment.time_masks": 0, "augment.mixup": 0.0, "precision.mode": "fp32", "train.init_ulps": 0,
                "model.init_skip": ""}
PEER_SHORT = {"--data": "data.dir", "--out": "train.out", "--steps": "train.steps", "--seed": "train.seed"}


def parse_value(text, default):
    if isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    return text.strip()


def peer_options(deck, overrides):
    """avtrain's options from a deck and `--section.key value` overrides (and --data/--out/--steps/--seed);
    keys the peer does not know are left out (threads, checkpoints, logging: they change nothing trained)."""
    import configparser
    options = dict(PEER_DEFAULTS)
    ini = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    if deck:
        if not ini.read(deck):
            raise SystemExit(f"torch_avnet: cannot read deck {deck}")
    pairs = [(f"{section}.{key}", value) for section in ini.sections() for key, value in ini[section].items()]
    if len(overrides) % 2:
        raise SystemExit(f"torch_avnet: option {overrides[-1]} has no value")
    for flag, value in zip(overrides[::2], overrides[1::2]):
        if not flag.startswith("--"):
            raise SystemExit(f"torch_avnet: expected --section.key, got {flag}")
        pairs.append((PEER_SHORT.get(flag, flag[2:]), value))
    for key, value in pairs:
        if key in options:
            options[key] = parse_value(value, PEER_DEFAULTS[key])
    for key, needed in PEER_REFUSES.items():
        if options[key] != needed:
            raise SystemExit(f"torch_avnet: {key} {options[key]!r}: the peer trains only with {key} {needed!r}")
    return options


def peer_config(options, shards):
    o = {k.split(".", 1)[1]: v for k, v in options.items() if k.startswith("model.")}
    frames, height, width_px, channels = shards.video_shape
    return AVNetConfig(audio_samples=shards.audio_shape[0], sample_rate=int(shards.attrs["sample_rate"]), frames=frames,
                       height=height, width_px=width_px, channels=channels, num_classes=shards.num_classes,
                       width=o["width"], depth=o["depth"], heads=o["heads"], mlp_ratio=o["mlp_ratio"],
                       audio_window=o["audio_window"], audio_hop=o["audio_hop"], mel_bins=o["mel_bins"],
                       tubelet_frames=o["tubelet_frames"], patch=o["patch"], nce_weight=o["nce_weight"],
                       nce_temperature=o["nce_temperature"], ce_weight=o["ce_weight"], task=o["task"],
                       init_std=o["init_std"])


SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "BF16": None}


def write_safetensors(path, tensors):
    """The safetensors layout (8-byte little-endian header length, JSON header, raw data), float32."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file of F32 (or BF16) tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        if e["dtype"] == "F32":
            values = np.frombuffer(data, dtype="<f4").astype(np.float32)
        elif e["dtype"] == "BF16":
            values = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name} has dtype {e['dtype']}: the peer reads F32 and BF16")
        out[name] = torch.from_numpy(values.reshape(e["shape"]).copy())
    return out


def run_init(args, overrides):
    """The peer's initial weights for a deck and a shard set, as a safetensors file that both avtrain
    and the peer start from (model.init_from)."""
    options = peer_options(args.deck, overrides)
    shards = ShardSet(options["data.dir"])
    torch.manual_seed(options["train.seed"])
    model = AVNet(peer_config(options, shards))
    write_safetensors(args.init_out, model.state_dict())
    print(json.dumps({"init": args.init_out, "tensors": len(model.state_dict()),
                      "parameters": sum(p.numel() for p in model.parameters())}))


def learning_rate(options, step):
    """src/optim/lr_schedule.hpp: linear warm-up, then a cosine to min_lr at the last step (a float)."""
    lr, min_lr, warmup, total = options["optim.lr"], options["optim.min_lr"], options["optim.warmup_steps"], \
        options["train.steps"]
    if warmup > 0 and step < warmup:
        return float(np.float32(np.float32(lr) * np.float32(step + 1) / np.float32(warmup)))
    decay = max(1, total - 1 - warmup)
    progress = min(max((step - warmup) / decay, 0.0), 1.0)
    return float(np.float32(min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))))


def module_of(name):
    return name.rsplit(".", 1)[0]


def dprime(auc):
    from statistics import NormalDist
    if not 0.0 < auc < 1.0:
        return math.copysign(math.inf, auc - 0.5) if auc != 0.5 else 0.0
    return math.sqrt(2.0) * NormalDist().inv_cdf(auc)


def validation_metrics(logits, targets, multi_label):
    """docs/metrics.md, as sklearn computes them: val_loss (cross-entropy, or binary cross-entropy),
    top-1 and top-5 (ties: the lower class first), mAP over classes with a positive, AUC over classes
    with positives and negatives, d'."""
    from sklearn.metrics import average_precision_score, roc_auc_score
    x = torch.from_numpy(logits).double()
    if multi_label:
        loss = F.binary_cross_entropy_with_logits(x, torch.from_numpy(targets).double()).item()
    else:
        loss = F.cross_entropy(x, torch.from_numpy(targets.argmax(axis=1))).item()
    order = np.argsort(-logits, axis=1, kind="stable")
    rows = np.arange(len(logits))[:, None]
    top1 = float(np.mean(targets[rows[:, 0], order[:, 0]] > 0))
    top5 = float(np.mean((targets[rows, order[:, :5]] > 0).any(axis=1)))
    aps = [average_precision_score(targets[:, c], logits[:, c]) for c in range(targets.shape[1]) if targets[:, c].any()]
    aucs = [roc_auc_score(targets[:, c], logits[:, c]) for c in range(targets.shape[1])
            if targets[:, c].any() and not targets[:, c].all()]
    mean_auc = float(np.mean(aucs)) if aucs else math.nan
    return {"val_loss": loss, "val_acc": top1, "val_top5": top5, "val_map": float(np.mean(aps)) if aps else math.nan,
            "val_auc": mean_auc, "val_dprime": dprime(mean_auc) if aucs else math.nan}


@torch.no_grad()
def evaluate_samples(model, shards, indices, batch_size):
    model.eval()
    logits, targets = [], []
    for begin in range(0, len(indices), batch_size):
        batch = shards.batch(indices[begin:begin + batch_size])
        _, _, _, out = model(batch)
        logits.append(out.double().numpy())
        targets.append(label_targets(batch, shards.num_classes).numpy().astype(np.uint8))
    model.train()
    return np.concatenate(logits), np.concatenate(targets)


class StepBatchNorm:
    """avtrain's BatchNorm running statistics (src/model/batch_norm.hpp): the batch mean and unbiased
    variance of each micro-batch summed over the step, and once per step their mean updates the
    running statistics with momentum 0.1 (PyTorch updates them per forward)."""

    def __init__(self, model):
        self.norms = [m for m in model.modules() if isinstance(m, MaskedBatchNorm)]
        self.sums = {}
        for bn in self.norms:
            bn.update_running_statistics = self.collector(bn)

    def collector(self, bn):
        def collect(mean, biased_var, count):
            unbiased = biased_var * count / (count - 1)
            s = self.sums.setdefault(id(bn), [torch.zeros_like(mean), torch.zeros_like(mean)])
            s[0] += mean.detach()
            s[1] += unbiased.detach()
        return collect

    @torch.no_grad()
    def fold(self, micro_batches):
        for bn in self.norms:
            mean_sum, var_sum = self.sums.pop(id(bn))
            for running, summed in ((bn.running_mean, mean_sum), (bn.running_var, var_sum)):
                running.mul_(1.0 - bn.momentum).add_(summed * (bn.momentum / micro_batches))


STEP_COLUMNS = ("step", "epoch", "loss", "grad_norm", "loss_scale", "skipped", "lr", "step_ms", "data_wait_ms",
                "comm_ms", "samples_per_s", "mem_peak_mb", "act_mb", "bubble", "bubble_theory", "val_loss", "val_acc",
                "val_top5", "val_map", "val_auc", "val_dprime")
# act_absmax is left out: the peer does not measure it, and avtrain-reconcile reads an empty field as malformed
LAYER_COLUMNS = ("step", "layer", "grad_norm", "param_norm", "grad_underflow_frac", "nonfinite")
FP16_SMALLEST_NORMAL = 2.0 ** -14


def data_fingerprint(options, shards, sampler, val_samples):
    """run.json's `data` as avtrain writes it (src/train/run_manifest.cpp)."""
    d = {"dir": options["data.dir"], "audio_samples": int(shards.audio_shape[0]),
         "audio_type": "int16" if shards.audio_int16 else "float32", "fps": float(shards.attrs["fps"]),
         "num_classes": shards.num_classes, "sample_rate": int(shards.attrs["sample_rate"]),
         "shards": [{"bytes": os.path.getsize(os.path.join(shards.dir, n)), "name": n, "samples": k}
                    for n, k in zip(shards.names, shards.samples)],
         "steps_per_epoch": sampler.steps_per_epoch, "total_samples": shards.total,
         "train_samples": len(sampler.train), "val_samples": val_samples,
         "video_shape": [int(v) for v in shards.video_shape]}
    if options["data.val_dir"]:
        d["val_dir"] = options["data.val_dir"]
    if "class_names" in shards.attrs:
        names = shards.attrs["class_names"]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in np.atleast_1d(names)]
        d["class_names"] = names
    return d


def format_row(columns, values):
    out = []
    for c in columns:
        v = values.get(c)
        if v is None:
            out.append("")
        elif isinstance(v, str):
            out.append(v)
        elif c in ("step", "epoch", "skipped", "nonfinite"):
            out.append(str(int(v)))
        else:
            out.append(repr(float(v)))
    return ",".join(out) + "\n"


def run_train(args, overrides):
    """Trains as avtrain does, on the same shards: the samples of avtrain's sampler (validation/avtrain_sampler.py)
    step by step, micro-batches in order, the loss their mean, AdamW with avtrain's schedule, clipping and
    BatchNorm statistics, no augmentation, validation every train.eval_interval steps and at the last;
    writes run.json, trace.csv and layers.csv in avtrain's format (docs/traces.md) for avtrain-reconcile."""
    import avtrain_sampler
    options = peer_options(args.deck, overrides)
    out = options["train.out"]
    if not out or not options["data.dir"]:
        raise SystemExit("torch_avnet train: needs --data DIR and --out DIR")
    torch.set_num_threads(max(1, options["train.threads"]))
    shards = ShardSet(options["data.dir"])
    cfg = peer_config(options, shards)
    if cfg.task == "single_label" and shards.multi_label:
        raise SystemExit(f"{shards.dir}: a multi-label set (format v2) needs model.task multi_label")
    val_shards = ShardSet(options["data.val_dir"]) if options["data.val_dir"] else None
    mb, micro_batches = options["train.micro_batch"], options["train.micro_batches"]
    sampler = avtrain_sampler.Sampler(shards.total, 0.0 if val_shards else options["data.val_fraction"],
                                      options["train.seed"], mb * micro_batches)
    if options["data.sampling"] == "balanced":
        sampler.draw_by_weight(avtrain_sampler.balanced_weights(shards.label_sets(sampler.train), shards.num_classes))
    val_set, val_indices = (val_shards, list(range(val_shards.total))) if val_shards else (shards, sampler.validation)

    torch.manual_seed(options["train.seed"])
    model = AVNet(cfg).train()
    if options["model.init_from"]:
        model.load_state_dict(read_safetensors(options["model.init_from"]), strict=True)
    statistics_ = StepBatchNorm(model)
    optimiser = make_adamw(model, lr=options["optim.lr"], weight_decay=options["optim.weight_decay"])
    for group in optimiser.param_groups:
        group["betas"], group["eps"] = (options["optim.beta1"], options["optim.beta2"]), options["optim.eps"]
    names = [n for n, _ in model.named_parameters()]
    modules = list(dict.fromkeys(module_of(n) for n in names))

    os.makedirs(out, exist_ok=True)
    config = {k: v for k, v in options.items()}
    run = {"config": config, "seed": options["train.seed"], "deck": args.deck or "",
           "data": data_fingerprint(options, shards, sampler, len(val_indices)),
           "layout": {"world_size": 1, "pp": 1, "dp": 1, "micro_batch": mb, "micro_batches": micro_batches,
                      "global_batch": mb * micro_batches, "device": "cpu", "threads": options["train.threads"]},
           "precision": {"mode": "fp32"},
           "build": {"framework": "pytorch", "torch": torch.__version__, "peer": "validation/torch_avnet.py train"},
           "model": {"parameters": sum(p.numel() for p in model.parameters())}}
    with open(os.path.join(out, "run.json.tmp"), "w") as f:
        json.dump(run, f, indent=2)
    os.replace(os.path.join(out, "run.json.tmp"), os.path.join(out, "run.json"))
    trace = open(os.path.join(out, "trace.csv"), "w")
    layers = open(os.path.join(out, "layers.csv"), "w")
    trace.write(",".join(STEP_COLUMNS) + "\n")
    layers.write(",".join(LAYER_COLUMNS) + "\n")
    steps, interval, clip = options["train.steps"], options["train.eval_interval"], options["optim.clip_norm"]
    for step in range(steps):
        start = time.perf_counter()
        indices = sampler.batch(step)
        optimiser.zero_grad(set_to_none=False)
        loss_sum = 0.0
        for m in range(micro_batches):
            loss, _, _, _ = model(shards.batch(indices[m * mb:(m + 1) * mb]))
            (loss / micro_batches).backward()
            loss_sum += loss.item()
        statistics_.fold(micro_batches)
        grads = {n: p.grad for n, p in model.named_parameters()}
        squares = {mod: 0.0 for mod in modules}
        row_layers = []
        for n in names:
            squares[module_of(n)] += float((grads[n].double() ** 2).sum())
        grad_norm = math.sqrt(sum(squares.values()))
        params = dict(model.named_parameters())
        for mod in modules:
            members = [n for n in names if module_of(n) == mod]
            g = torch.cat([grads[n].reshape(-1) for n in members])
            w = torch.cat([params[n].detach().reshape(-1) for n in members]).double()
            row_layers.append({"step": step, "layer": mod, "grad_norm": math.sqrt(squares[mod]),
                               "param_norm": float(w.norm()),
                               "grad_underflow_frac": float((g.abs() < FP16_SMALLEST_NORMAL).double().mean()),
                               "nonfinite": int((~torch.isfinite(g)).sum())})
        if not math.isfinite(loss_sum) or not math.isfinite(grad_norm):
            raise SystemExit(f"torch_avnet train: step {step}: loss {loss_sum / micro_batches} grad_norm {grad_norm}")
        factor = np.float32(clip / (grad_norm + 1e-6)) if clip > 0 and grad_norm > clip else np.float32(1.0)
        if factor != 1.0:
            for p in model.parameters():
                p.grad.mul_(float(factor))
        lr = learning_rate(options, step)
        for group in optimiser.param_groups:
            group["lr"] = lr
        optimiser.step()
        step_ms = (time.perf_counter() - start) * 1e3
        row = {"step": step, "epoch": sampler.epoch_of(step), "loss": loss_sum / micro_batches,
               "grad_norm": grad_norm, "loss_scale": 1, "skipped": 0, "lr": lr, "step_ms": step_ms,
               "data_wait_ms": 0, "comm_ms": 0, "samples_per_s": mb * micro_batches / (step_ms / 1e3),
               "mem_peak_mb": 0, "act_mb": 0, "bubble": 0, "bubble_theory": 0}
        if (interval > 0 and (step + 1) % interval == 0) or step + 1 == steps:
            row.update(validation_metrics(*evaluate_samples(model, val_set, val_indices, mb), cfg.task == "multi_label"))
        trace.write(format_row(STEP_COLUMNS, row))
        for r in row_layers:
            layers.write(format_row(LAYER_COLUMNS, r))
        trace.flush()
        layers.flush()
        if "val_map" in row or (step + 1) % 10 == 0:
            extra = "".join(f"  {k} {row[k]:.4f}" for k in ("val_loss", "val_acc", "val_map") if k in row)
            print(f"[peer] step {step + 1:5d}/{steps}  loss {row['loss']:.4f}  grad_norm {grad_norm:.3f}  lr {lr:.2e}"
                  f"  {step_ms:.0f} ms{extra}", flush=True)
    trace.close()
    layers.close()


# ----------------------------------------------------------------------------------------------
# Command line

def config_from_args(args, **shape):
    return AVNetConfig(width=args.width, depth=args.depth, heads=args.heads, mlp_ratio=args.mlp_ratio,
                       audio_window=args.window, audio_hop=args.hop, mel_bins=args.mel,
                       tubelet_frames=args.tubelet, patch=args.patch, nce_weight=args.nce_weight,
                       nce_temperature=args.nce_temperature, init_std=args.init_std, ce_weight=args.ce_weight,
                       task=args.task, **shape)


def add_architecture_options(p):
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-ratio", type=int, default=4)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--hop", type=int, default=128)
    p.add_argument("--mel", type=int, default=64)
    p.add_argument("--tubelet", type=int, default=2)
    p.add_argument("--patch", type=int, default=8)
    p.add_argument("--nce-weight", type=float, default=0.1)
    p.add_argument("--nce-temperature", type=float, default=0.1)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--ce-weight", type=float, default=1.0)
    p.add_argument("--task", choices=["single_label", "multi_label"], default="single_label")
    p.add_argument("--threads", type=int, default=2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)

    bench = modes.add_parser("bench", help="time training steps on random inputs")
    add_architecture_options(bench)
    bench.add_argument("--batch", type=int, default=32)
    bench.add_argument("--audio-samples", type=int, default=8000)
    bench.add_argument("--sample-rate", type=int, default=8000)
    bench.add_argument("--frames", type=int, default=8)
    bench.add_argument("--height", type=int, default=32)
    bench.add_argument("--width-px", type=int, default=32)
    bench.add_argument("--channels", type=int, default=1)
    bench.add_argument("--classes", type=int, default=16)
    bench.add_argument("--warmup", type=int, default=3)
    bench.add_argument("--steps", type=int, default=10)
    bench.add_argument("--autocast", choices=["bf16"], default=None)
    bench.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    bench.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                       help="explicit: scores, softmax and product as written (the seed recipe); sdpa: "
                            "torch.nn.functional.scaled_dot_product_attention with the key mask")
    bench.add_argument("--lr", type=float, default=2e-3)
    bench.add_argument("--weight-decay", type=float, default=0.05)
    bench.add_argument("--clip-norm", type=float, default=1.0)
    bench.add_argument("--seed", type=int, default=1)

    reference = modes.add_parser("reference", help="float64 loss and gradients for one micro-batch")
    add_architecture_options(reference)
    reference.add_argument("--params", required=True, help="HDF5 file, one float32 dataset per parameter name")
    reference.add_argument("--batch", dest="batch_file", required=True, help="HDF5 micro-batch file")
    reference.add_argument("--out", required=True, help="HDF5 file to write")
    evaluate = modes.add_parser("evaluate", help="validation loss of an avtrain checkpoint, against avtrain's")
    weights = evaluate.add_mutually_exclusive_group(required=True)
    weights.add_argument("--checkpoint", help="OUT/checkpoints/step-NNNNNNN")
    weights.add_argument("--safetensors", help="a file avtrain-export wrote (needs the safetensors package)")
    evaluate.add_argument("--data", required=True, help="the shard directory the run trained on")
    evaluate.add_argument("--eval-json", required=True, help="OUT/eval.json of avtrain --eval-only on it")
    evaluate.add_argument("--batch", type=int, default=64)
    evaluate.add_argument("--threads", type=int, default=2)

    for name, text in (("init", "the peer's initial weights as safetensors, for model.init_from"),
                       ("train", "train on shards as avtrain does; avtrain's traces for avtrain-reconcile")):
        mode = modes.add_parser(name, help=text, description="Any other option is avtrain's --section.key VALUE "
                                "(or --data, --out, --steps, --seed), read as avtrain reads it.")
        mode.add_argument("deck", nargs="?", default="", help="an avtrain deck (inputs/*.ini)")
        if name == "init":
            mode.add_argument("--init-out", required=True, help="the safetensors file to write")
    args, rest = parser.parse_known_args(argv)
    if args.mode not in ("init", "train") and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.overrides = rest
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.mode != "bench" and h5py is None:
        raise SystemExit(f"torch_avnet.py {args.mode}: needs the h5py module (apt-get install python3-h5py)")
    if args.mode in ("init", "train"):
        {"init": run_init, "train": run_train}[args.mode](args, args.overrides)
        return
    {"bench": run_bench, "reference": run_reference, "evaluate": run_evaluate}[args.mode](args)


if __name__ == "__main__":
    main()
