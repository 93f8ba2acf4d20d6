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
        """batch: audio [B, A] float, audio_len [B], video uint8 [B, F, H, W, C], video_len [B], label [B].
        Returns (loss, ce_loss, nce_loss, logits)."""
        audio_mask, video_mask = self.token_masks(batch["audio_len"], batch["video_len"])
        audio_tokens = self.audio(batch["audio"], audio_mask, batch["audio_len"])
        video_tokens = self.video(batch["video"], video_mask)
        x = self.embed(audio_tokens, video_tokens)
        key_mask = torch.cat([audio_mask, video_mask], dim=1)
        for block in self.blocks:
            x = block(x, key_mask)
        logits, pa, pv = self.head(x, audio_mask, video_mask)
        ce_loss = F.cross_entropy(logits, batch["label"].long())
        nce_loss = symmetric_info_nce(pa, pv, self.cfg.nce_temperature)
        loss = ce_loss + self.cfg.nce_weight * nce_loss
        return loss, ce_loss, nce_loss, logits


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


def load_micro_batch(path):
    with h5py.File(path, "r") as f:
        audio = f["audio"][...]
        if audio.dtype == np.int16:
            audio = audio.astype(np.float32) / 32768.0
        batch = {
            "audio": torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
            "audio_len": torch.from_numpy(f["audio_len"][...].astype(np.int64)),
            "video": torch.from_numpy(np.ascontiguousarray(f["video"][...], dtype=np.uint8)),
            "video_len": torch.from_numpy(f["video_len"][...].astype(np.int64)),
            "label": torch.from_numpy(f["label"][...].astype(np.int64)),
        }
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


def read_samples(shard_dir, shards, indices):
    """The samples of the global indices (shards in the fingerprint's order), as a batch."""
    starts = np.cumsum([0] + [s["samples"] for s in shards])
    parts = {k: [] for k in ("audio", "audio_len", "video", "video_len", "label")}
    for i in indices:
        k = int(np.searchsorted(starts, i, side="right") - 1)
        with h5py.File(os.path.join(shard_dir, shards[k]["name"]), "r") as f:
            row = i - int(starts[k])
            for key in parts:
                parts[key].append(f[key][row])
    audio = np.stack(parts["audio"])
    if audio.dtype == np.int16:
        audio = audio.astype(np.float32) / 32768.0
    return {"audio": torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
            "audio_len": torch.from_numpy(np.array(parts["audio_len"], dtype=np.int64)),
            "video": torch.from_numpy(np.ascontiguousarray(np.stack(parts["video"]), dtype=np.uint8)),
            "video_len": torch.from_numpy(np.array(parts["video_len"], dtype=np.int64)),
            "label": torch.from_numpy(np.array(parts["label"], dtype=np.int64))}


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
# Command line

def config_from_args(args, **shape):
    return AVNetConfig(width=args.width, depth=args.depth, heads=args.heads, mlp_ratio=args.mlp_ratio,
                       audio_window=args.window, audio_hop=args.hop, mel_bins=args.mel,
                       tubelet_frames=args.tubelet, patch=args.patch, nce_weight=args.nce_weight,
                       nce_temperature=args.nce_temperature, init_std=args.init_std, **shape)


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
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.mode != "bench" and h5py is None:
        raise SystemExit(f"torch_avnet.py {args.mode}: needs the h5py module (apt-get install python3-h5py)")
    {"bench": run_bench, "reference": run_reference, "evaluate": run_evaluate}[args.mode](args)


if __name__ == "__main__":
    main()
