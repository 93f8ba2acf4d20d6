#include "model/model_config.hpp"

#include <string>

#include "core/error.hpp"

namespace avtrain {

void require_task_fits(const ModelConfig& m, const data::SetInfo& s, const std::string& dir) {
  if (m.task == Task::single_label && s.multi_label)
    throw Error(dir + ": a multi-label shard set (format v2, a set of classes a clip) cannot train model.task "
                "single_label; set model.task multi_label");
}

TokenGeometry TokenGeometry::of(const ModelConfig& m, const data::SetInfo& s) {
  auto fail = [](const std::string& what) { throw Error("model: " + what); };
  if (m.width <= 0 || m.depth < 0 || m.heads <= 0 || m.width % m.heads != 0)
    fail("model.width (" + std::to_string(m.width) + ") must be a positive multiple of model.heads (" +
         std::to_string(m.heads) + ")");
  if (m.audio_window < 2 || m.audio_hop < 1) fail("model.audio_window must be >= 2 and model.audio_hop >= 1");
  if (s.audio_samples < m.audio_window)
    fail("shard audio length A=" + std::to_string(s.audio_samples) + " is shorter than model.audio_window=" +
         std::to_string(m.audio_window));
  if (m.tubelet_frames < 1 || m.patch < 1 || s.frames % m.tubelet_frames || s.height % m.patch ||
      s.width % m.patch)
    fail("video F x H x W = " + std::to_string(s.frames) + " x " + std::to_string(s.height) + " x " +
         std::to_string(s.width) + " is not divisible by model.tubelet_frames=" +
         std::to_string(m.tubelet_frames) + " and model.patch=" + std::to_string(m.patch));
  TokenGeometry g;
  g.frames = int(1 + (s.audio_samples - m.audio_window) / m.audio_hop);
  g.audio_tokens = (g.frames - 1) / 2 + 1;
  g.video_tokens = (s.frames / m.tubelet_frames) * (s.height / m.patch) * (s.width / m.patch);
  g.patch_dim = m.tubelet_frames * m.patch * m.patch * s.channels;
  g.tokens = g.audio_tokens + g.video_tokens;
  g.bins = m.audio_window / 2 + 1;
  g.window = m.audio_window;
  g.hop = m.audio_hop;
  g.tubelet_frames = m.tubelet_frames;
  g.patch = m.patch;
  g.tokens_per_tubelet_step = (s.height / m.patch) * (s.width / m.patch);
  return g;
}

int TokenGeometry::valid_frames(int audio_len) const {
  // Frames that lie wholly inside the signal, at least one.
  return audio_len >= window ? 1 + (audio_len - window) / hop : 1;
}

int TokenGeometry::valid_audio_tokens(int audio_len) const { return (valid_frames(audio_len) - 1) / 2 + 1; }

int TokenGeometry::valid_video_tokens(int video_len) const {
  return (video_len + tubelet_frames - 1) / tubelet_frames * tokens_per_tubelet_step;
}

}  // namespace avtrain
