#!/usr/bin/python3
"""Self-check of validation/torch_avnet.py (plain script; exits non-zero on failure).

1. The `reference` mode, run as a command on HDF5 files at a tiny shape, writes gradients that
   match central finite differences of the float64 loss: the cross-entropy with `label`, and under
   --task multi_label the binary cross-entropy with a v2 batch's `labels` (sets of one to three
   classes), which also equals its naive form -mean(t log s(x) + (1 - t) log(1 - s(x))) over clips
   and classes; a v1 batch under multi_label reads as the one-hot sets of its labels.
2. Pieces of the definition checked against independent formulations: the DFT power spectrum
   against torch.fft.rfft, the HTK filterbank against torchaudio's slope formulation, the masked
   BatchNorm with every token valid against F.batch_norm, and the loss is unchanged by whatever
   lies in the padded audio and video.
3. The PyTorch peer's fused attention (`bench --attention sdpa`: scaled_dot_product_attention with
   the two-segment key mask) gives the explicit attention's loss and gradients on a padded batch.

Run: /usr/bin/python3 validation/test_torch_avnet.py
"""
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_avnet as avnet  # noqa: E402

TINY_ARCH = ["--width", "16", "--depth", "1", "--heads", "2", "--mlp-ratio", "4", "--mel", "8",
             "--window", "64", "--hop", "32", "--tubelet", "2", "--patch", "4", "--threads", "2"]
SAMPLE_RATE, NUM_CLASSES = 8000, 5
AUDIO_SAMPLES, FRAMES, HEIGHT, WIDTH, CHANNELS = 600, 4, 8, 8, 1
AUDIO_LEN = [600, 317, 40, 451]   # 40 < window: one (partial) valid frame
VIDEO_LEN = [4, 3, 1, 2]
FD_STEP = 1e-6
FD_RTOL, FD_ATOL = 1e-5, 1e-7
FD_ENTRIES_PER_PARAM = 24
FD_ENTRIES_PER_PARAM_MULTI_LABEL = 8  # the loss term alone differs: fewer entries keep the test's time

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message)
    if not ok:
        failures.append(message)


def tiny_arch(multi_label=False):
    return TINY_ARCH + (["--task", "multi_label"] if multi_label else [])


def tiny_config(multi_label=False):
    args = avnet.parse_args(["reference", "--params", "-", "--batch", "-", "--out", "-"] + tiny_arch(multi_label))
    return avnet.config_from_args(args, audio_samples=AUDIO_SAMPLES, sample_rate=SAMPLE_RATE, frames=FRAMES,
                                  height=HEIGHT, width_px=WIDTH, channels=CHANNELS, num_classes=NUM_CLASSES)


def random_padded_batch(rng):
    B = len(AUDIO_LEN)
    audio = rng.uniform(-1, 1, (B, AUDIO_SAMPLES)).astype(np.float32)
    video = rng.integers(0, 256, (B, FRAMES, HEIGHT, WIDTH, CHANNELS), dtype=np.uint8)
    for b in range(B):
        audio[b, AUDIO_LEN[b]:] = 0
        video[b, VIDEO_LEN[b]:] = 0
    return {"audio": audio, "audio_len": np.array(AUDIO_LEN, np.int32), "video": video,
            "video_len": np.array(VIDEO_LEN, np.int32), "label": rng.integers(0, NUM_CLASSES, B).astype(np.int32)}


def with_label_sets(batch, rng):
    """The batch as format v2: `labels` [B, classes], sample b's set of b % 3 + 1 distinct classes."""
    B = len(batch["label"])
    labels = np.zeros((B, NUM_CLASSES), np.uint8)
    for b in range(B):
        labels[b, rng.choice(NUM_CLASSES, size=b % 3 + 1, replace=False)] = 1
    return {**{k: v for k, v in batch.items() if k != "label"}, "labels": labels}


def random_parameters(model, rng):
    """Far from the initialisation, so that every nonlinearity matters."""
    params = {}
    for name, p in model.named_parameters():
        values = rng.normal(0.0, 0.3, p.shape)
        if avnet.is_norm_parameter(name) and name.endswith(".weight"):
            values += 1.0
        params[name] = values.astype(np.float32)
    return params


def write_inputs(directory, params, batch):
    params_path, batch_path = os.path.join(directory, "params.h5"), os.path.join(directory, "batch.h5")
    with h5py.File(params_path, "w") as f:
        for name, value in params.items():
            f.create_dataset(name, data=value)
    with h5py.File(batch_path, "w") as f:
        f.attrs["sample_rate"] = np.int32(SAMPLE_RATE)
        f.attrs["num_classes"] = np.int32(NUM_CLASSES)
        for name, value in batch.items():
            f.create_dataset(name, data=value)
    return params_path, batch_path


def run_reference_command(params_path, batch_path, out_path, multi_label=False):
    command = [sys.executable, os.path.join(HERE, "torch_avnet.py"), "reference", "--params", params_path,
               "--batch", batch_path, "--out", out_path] + tiny_arch(multi_label)
    subprocess.run(command, check=True)
    with h5py.File(out_path, "r") as f:
        losses = {k: float(f.attrs[k]) for k in ("loss", "ce_loss", "nce_loss")}
        grads = {name: f["grad"][name][...] for name in f["grad"]}
        logits = f["logits"][...]
    return losses, grads, logits


def float64_model(params_path, batch, multi_label=False):
    model = avnet.AVNet(tiny_config(multi_label))
    avnet.load_parameters(model, params_path)
    return model.double().train(), dict(batch, audio=batch["audio"].double())


def total_loss(model, batch):
    with torch.no_grad():
        return model(batch)[0].item()


def check_binary_cross_entropy(model, batch, logits, ce_loss):
    """The multi-label term against its naive form, and v1 labels read as one-hot sets."""
    t = batch["labels"].double()
    x = logits.detach().double()
    naive = -(t * torch.log(torch.sigmoid(x)) + (1 - t) * torch.log(1 - torch.sigmoid(x))).mean().item()
    check(math.isclose(ce_loss.item(), naive, rel_tol=1e-12),
          f"multi-label loss {ce_loss.item():.9f} = naive binary cross-entropy {naive:.9f}")
    one_hot = dict(batch, labels=F.one_hot(batch["label"], NUM_CLASSES).to(torch.uint8))
    v1 = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        check(model(v1)[1].item() == model(one_hot)[1].item(),
              "a v1 batch under multi_label: the one-hot sets of its labels")


def check_reference_against_finite_differences(directory, multi_label=False):
    rng = np.random.default_rng(7)
    batch_np = random_padded_batch(rng)
    if multi_label:
        batch_np = with_label_sets(batch_np, rng)
    params = random_parameters(avnet.AVNet(tiny_config(multi_label)), rng)
    params_path, batch_path = write_inputs(directory, params, batch_np)
    losses, grads, logits = run_reference_command(params_path, batch_path, os.path.join(directory, "out.h5"),
                                                  multi_label)
    print(f"{'multi-label' if multi_label else 'single-label'} reference against finite differences")

    batch, _, _ = avnet.load_micro_batch(batch_path)
    model, batch = float64_model(params_path, batch, multi_label)
    loss, ce_loss, nce_loss, model_logits = model(batch)
    if multi_label:
        check_binary_cross_entropy(model, batch, model_logits, ce_loss)
    check(math.isclose(losses["loss"], losses["ce_loss"] + 0.1 * losses["nce_loss"], rel_tol=1e-12),
          f"reference loss {losses['loss']:.6f} = ce {losses['ce_loss']:.6f} + 0.1 nce {losses['nce_loss']:.6f}")
    check(abs(loss.item() - losses["loss"]) < 1e-12 and np.allclose(model_logits.detach().numpy(), logits,
                                                                    rtol=0, atol=1e-12),
          "reference loss and logits reproduce in-process")
    check(set(grads) == {n for n, _ in model.named_parameters()}, f"one gradient per parameter ({len(grads)})")

    worst = 0.0
    for name, p in model.named_parameters():
        flat = p.data.view(-1)
        per_param = FD_ENTRIES_PER_PARAM_MULTI_LABEL if multi_label else FD_ENTRIES_PER_PARAM
        entries = rng.choice(flat.numel(), size=min(per_param, flat.numel()), replace=False)
        analytic = grads[name].reshape(-1)[entries]
        numeric = np.empty(len(entries))
        for j, i in enumerate(entries):
            saved = flat[i].item()
            flat[i] = saved + FD_STEP
            plus = total_loss(model, batch)
            flat[i] = saved - FD_STEP
            minus = total_loss(model, batch)
            flat[i] = saved
            numeric[j] = (plus - minus) / (2 * FD_STEP)
        # relative error with a floor of FD_ATOL / FD_RTOL; the check passes while error <= FD_RTOL
        error = np.max(np.abs(analytic - numeric) / (FD_ATOL / FD_RTOL + np.abs(numeric)))
        worst = max(worst, error)
        check(error <= FD_RTOL, f"grad/{name} matches finite differences on {len(entries)} entries (err {error:.1e})")
    print(f"worst gradient error {worst:.1e} (tolerance {FD_RTOL:.0e})")


def check_power_spectrum_against_rfft():
    win, hop = 64, 32
    rng = np.random.default_rng(1)
    audio = torch.from_numpy(rng.uniform(-1, 1, (2, 600)))
    frames = audio.unfold(1, win, hop) * avnet.periodic_hann_window(win)
    spectrum = frames @ avnet.dft_cos_minus_sin_matrix(win)
    power = spectrum[..., :win // 2 + 1] ** 2 + spectrum[..., win // 2 + 1:] ** 2
    expected = torch.fft.rfft(frames * 1.0, dim=-1).abs() ** 2
    hann_ok = torch.allclose(avnet.periodic_hann_window(win),
                             torch.hann_window(win, periodic=True, dtype=torch.float64))
    check(hann_ok and torch.allclose(power, expected, rtol=1e-10, atol=1e-10),
          "periodic Hann and DFT-matmul power spectrum match torch.hann_window / torch.fft.rfft")


def torchaudio_htk_filterbank(n_freqs, sample_rate, n_mels):
    """torchaudio.functional.melscale_fbanks(n_freqs, 0, sr/2, n_mels, sr, norm=None, mel_scale='htk')."""
    all_freqs = np.linspace(0, sample_rate // 2, n_freqs)
    m_max = 2595.0 * np.log10(1.0 + (sample_rate / 2) / 700.0)
    f_pts = 700.0 * (10 ** (np.linspace(0, m_max, n_mels + 2) / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts[None, :] - all_freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return np.maximum(0.0, np.minimum(down, up))


def check_filterbank_against_torchaudio_formula():
    for win, mels, sr in [(64, 8, 8000), (256, 64, 8000), (400, 40, 16000)]:
        ours = avnet.htk_mel_filterbank(win, mels, sr).numpy()
        theirs = torchaudio_htk_filterbank(win // 2 + 1, sr, mels)
        check(np.allclose(ours, theirs, rtol=1e-9, atol=1e-12),
              f"HTK filterbank win {win} mel {mels} sr {sr} matches torchaudio's formulation")


def check_masked_batch_norm_full_mask():
    torch.manual_seed(3)
    x = torch.randn(4, 9, 16, dtype=torch.float64) * 2 + 0.5
    bn = avnet.MaskedBatchNorm(16).double().train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    running_mean, running_var = torch.zeros(16, dtype=torch.float64), torch.ones(16, dtype=torch.float64)
    expected = F.batch_norm(x.transpose(1, 2), running_mean, running_var, bn.weight, bn.bias, training=True,
                            momentum=0.1, eps=1e-5).transpose(1, 2)
    ours = bn(x, torch.ones(4, 9, dtype=torch.bool))
    check(torch.allclose(ours, expected, atol=1e-12) and torch.allclose(bn.running_mean, running_mean, atol=1e-12)
          and torch.allclose(bn.running_var, running_var, atol=1e-12),
          "masked BatchNorm with every token valid matches F.batch_norm (output and running statistics)")


def noise_at_padded_tokens(token_mask, generator):
    """Forward hook adding noise to a module's [B, T, D] output where token_mask [B, T] is False."""
    def hook(module, inputs, output):
        noise = torch.randn(output.shape, generator=generator, dtype=output.dtype)
        return output + noise * (~token_mask[..., None]).to(output.dtype)
    return hook


def check_padding_does_not_matter():
    """Padded samples, padded conv outputs (BN statistics) and padded tokens (attention keys, pooling)
    must not change the loss."""
    cfg = tiny_config()
    torch.manual_seed(5)
    model = avnet.AVNet(cfg).double().train()
    rng = np.random.default_rng(11)
    batch = {k: torch.from_numpy(v) for k, v in random_padded_batch(rng).items()}
    batch["audio"] = batch["audio"].double()
    clean_loss = total_loss(model, batch)

    noisy = {k: v.clone() for k, v in batch.items()}
    valid_frames = avnet.valid_audio_frames(batch["audio_len"], cfg.audio_window, cfg.audio_hop)
    for b in range(len(AUDIO_LEN)):
        # a sample shorter than the window keeps its one frame, which reaches past audio_len
        end_of_valid_frames = (valid_frames[b].item() - 1) * cfg.audio_hop + cfg.audio_window
        noise = rng.uniform(-1, 1, AUDIO_SAMPLES - end_of_valid_frames)
        noisy["audio"][b, end_of_valid_frames:] = torch.from_numpy(noise)
        first_padded_frame = -(-VIDEO_LEN[b] // cfg.tubelet_frames) * cfg.tubelet_frames
        noisy["video"][b, first_padded_frame:] = 255
    noisy_input_loss = total_loss(model, noisy)
    check(noisy_input_loss == clean_loss,
          f"loss unchanged by padded audio samples and video frames ({clean_loss:.12f})")

    audio_mask, video_mask = model.token_masks(batch["audio_len"], batch["video_len"])
    generator = torch.Generator().manual_seed(13)
    hooks = [model.audio.conv.register_forward_hook(noise_at_padded_tokens(audio_mask, generator)),
             model.embed.register_forward_hook(
                 noise_at_padded_tokens(torch.cat([audio_mask, video_mask], dim=1), generator))]
    noisy_token_loss = total_loss(model, batch)
    for hook in hooks:
        hook.remove()
    check(abs(noisy_token_loss - clean_loss) < 1e-13,
          f"loss unchanged by noise in padded conv outputs and tokens ({noisy_token_loss - clean_loss:.1e})")


def check_sdpa_attention_matches_explicit():
    """The peer's bench may time torch's fused attention: it must be the same model."""
    if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0 (Debian 12 has 1.13)
        print(f"skip  sdpa attention against the explicit one: torch {torch.__version__} has no "
              "scaled_dot_product_attention")
        return
    cfg = tiny_config()
    rng = np.random.default_rng(17)
    batch = {k: torch.from_numpy(v) for k, v in random_padded_batch(rng).items()}
    batch["audio"] = batch["audio"].double()
    results = []
    for sdpa in (False, True):
        cfg.sdpa = sdpa
        torch.manual_seed(7)
        model = avnet.AVNet(cfg).double().train()
        loss = model(batch)[0]
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_e, grads_e), (loss_s, grads_s) = results
    # relative to each gradient's largest entry, at least 1e-6 (a conv bias before BatchNorm has ~0 gradient)
    worst = max((grads_s[n] - g).abs().max().item() / max(g.abs().max().item(), 1e-6) for n, g in grads_e.items())
    check(abs(loss_s - loss_e) < 1e-12 and worst < 1e-8,
          f"sdpa attention gives the explicit attention's loss ({loss_s - loss_e:.1e}) and gradients "
          f"(worst relative {worst:.1e})")


def main():
    torch.set_num_threads(2)
    check_sdpa_attention_matches_explicit()
    check_power_spectrum_against_rfft()
    check_filterbank_against_torchaudio_formula()
    check_masked_batch_norm_full_mask()
    check_padding_does_not_matter()
    for multi_label in (False, True):
        with tempfile.TemporaryDirectory() as directory:
            check_reference_against_finite_differences(directory, multi_label)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
