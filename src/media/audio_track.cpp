#include "media/audio_track.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "media/media_stream.hpp"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
}

namespace avtrain::media {

namespace {

// Mono at the pack's rate, in the shard's sample type.
class MonoResampler {
 public:
  MonoResampler(const AVFrame& first, const ClipShape& shape) : rate_(shape.sample_rate), int16_(shape.audio_int16) {
    AVChannelLayout in_layout{};
    if (first.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC || av_channel_layout_check(&first.ch_layout) == 0) {
      av_channel_layout_default(&in_layout, first.ch_layout.nb_channels);
    } else {
      av_channel_layout_copy(&in_layout, &first.ch_layout);
    }
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    SwrContext* swr = nullptr;
    const int code = swr_alloc_set_opts2(&swr, &mono, int16_ ? AV_SAMPLE_FMT_S16 : AV_SAMPLE_FMT_FLT, rate_,
                                         &in_layout, AVSampleFormat(first.format), first.sample_rate, 0, nullptr);
    av_channel_layout_uninit(&in_layout);
    if (code < 0 || swr == nullptr) throw MediaError("cannot set up the resampler: " + av_error_text(code));
    swr_.reset(swr);
    const int init = swr_init(swr);
    if (init < 0) throw MediaError("cannot set up the resampler: " + av_error_text(init));
    in_rate_ = first.sample_rate;
    in_format_ = first.format;
    in_channels_ = first.ch_layout.nb_channels;
  }

  bool accepts(const AVFrame& frame) const {
    return frame.sample_rate == in_rate_ && frame.format == in_format_ && frame.ch_layout.nb_channels == in_channels_;
  }

  // Converts `frame` (nullptr: what the filter still holds) into out_ (replaced each call).
  int convert(const AVFrame* frame) {
    return convert(frame ? const_cast<const std::uint8_t**>(frame->extended_data) : nullptr, frame ? frame->nb_samples : 0);
  }
  // Converts `samples` of silence in the input's format (the gap of a damaged packet): the filter
  // goes on through it, so the audio after the gap keeps its time.
  int convert_silence(int samples) {
    std::uint8_t** silence = nullptr;
    const AVSampleFormat format = AVSampleFormat(in_format_);
    const int code = av_samples_alloc_array_and_samples(&silence, nullptr, in_channels_, samples, format, 0);
    if (code < 0) throw MediaError("cannot fill a gap in the audio: " + av_error_text(code));
    av_samples_set_silence(silence, 0, samples, in_channels_, format);
    int made = 0;
    try {
      made = convert(const_cast<const std::uint8_t**>(silence), samples);
    } catch (...) {
      av_freep(&silence[0]);
      av_freep(&silence);
      throw;
    }
    av_freep(&silence[0]);
    av_freep(&silence);
    return made;
  }
  int input_rate() const { return in_rate_; }
  const std::uint8_t* samples() const { return out_.data(); }

 private:
  int convert(const std::uint8_t** in, int in_samples) {
    const int room = swr_get_out_samples(swr_.get(), in_samples) + 32;
    out_.resize(std::size_t(room) * (int16_ ? 2 : 4));
    std::uint8_t* out[] = {out_.data()};
    const int made = swr_convert(swr_.get(), out, room, in, in_samples);
    if (made < 0) throw MediaError("cannot resample the audio: " + av_error_text(made));
    return made;
  }

  int rate_;
  bool int16_;
  int in_rate_ = 0, in_format_ = 0, in_channels_ = 0;
  ResamplerHandle swr_;
  std::vector<std::uint8_t> out_;
};

}  // namespace

void decode_audio(const std::string& path, double start, double seconds, const ClipShape& shape, DecodedClip& clip,
                  OnDamaged on_damaged) {
  MediaStream stream(path, AVMEDIA_TYPE_AUDIO, on_damaged);
  stream.seek(start);
  const std::int64_t want = std::min<std::int64_t>(shape.audio_samples, std::llround(seconds * shape.sample_rate));
  const std::size_t bytes = shape.audio_int16 ? 2 : 4;
  std::uint8_t* out = shape.audio_int16 ? reinterpret_cast<std::uint8_t*>(clip.audio_pcm.data())
                                        : reinterpret_cast<std::uint8_t*>(clip.audio_float.data());
  std::int64_t filled = 0;
  std::int64_t to_skip = 0;  // resampled samples before `start`
  std::unique_ptr<MonoResampler> resampler;
  double end_seen = 0;

  auto take = [&](int made) {
    std::int64_t from = std::min<std::int64_t>(made, to_skip);
    to_skip -= from;
    const std::int64_t n = std::min<std::int64_t>(made - from, want - filled);
    if (n > 0) std::copy_n(resampler->samples() + from * bytes, n * bytes, out + filled * bytes);
    filled += std::max<std::int64_t>(n, 0);
  };

  // Damaged packets (skipped by the stream): silence for as long as they lasted, so the audio after
  // them stays at its time. The gap is where the next frame starts against where it would have
  // without the loss (from the timestamps), else the lost packets' durations; never more than the
  // clip still needs.
  double next_t = std::numeric_limits<double>::quiet_NaN();  // where the next frame starts, if none is lost
  MediaStream::Lost lost;
  auto fill_gap = [&](double gap) {
    if (!(gap > 0)) return;  // no time lost (or none known)
    const double needed = double(want - filled + to_skip) / shape.sample_rate + 0.1;
    const auto samples = std::llround(std::min(gap, needed) * resampler->input_rate());
    if (samples > 0) take(resampler->convert_silence(int(samples)));
  };

  while (filled < want) {
    const AVFrame* frame = stream.next_frame();
    const MediaStream::Lost now = stream.take_lost();
    lost.packets += now.packets;
    lost.seconds += now.seconds;
    if (frame == nullptr) break;
    if (frame->nb_samples <= 0) continue;
    double t = stream.seconds(frame);
    if (resampler && lost.packets > 0 && resampler->accepts(*frame)) {
      fill_gap(std::isfinite(t) && std::isfinite(next_t) ? t - next_t : lost.seconds);
      if (filled >= want) break;
    }
    lost = MediaStream::Lost{};
    if (!resampler) {
      resampler = std::make_unique<MonoResampler>(*frame, shape);
      if (!std::isfinite(t)) t = 0;
      const std::int64_t offset = std::llround((start - t) * shape.sample_rate);
      if (offset >= 0) {
        to_skip = offset;
      } else {
        filled = std::min<std::int64_t>(-offset, want);  // the audio starts late: silence before it
      }
    } else if (!resampler->accepts(*frame)) {
      throw MediaError("the audio changes its sample rate, format or channels mid-stream");
    }
    if (std::isfinite(t)) end_seen = std::max(end_seen, t + stream.duration(frame));
    next_t = std::isfinite(t) ? t + stream.duration(frame) : next_t + stream.duration(frame);
    take(resampler->convert(frame));
  }
  // Damaged packets at the end: their silence too.
  if (resampler && lost.packets > 0 && filled < want) {
    fill_gap(lost.seconds);
    if (std::isfinite(stream.damaged_end())) end_seen = std::max(end_seen, stream.damaged_end());
  }
  if (resampler && filled < want) take(resampler->convert(nullptr));
  clip.audio_packets = stream.packets();
  if (!resampler && stream.packets().damaged > 0) {
    throw MediaError("no audio decoded: " + std::to_string(stream.packets().damaged) + " of " +
                     std::to_string(stream.packets().packets) + " packets damaged (" + stream.packets().first_error + ")");
  }
  if (!resampler) throw MediaError("no audio decoded");
  if (filled <= 0) {
    throw start_past_the_end(stream, start, end_seen);
  }
  clip.audio_len = static_cast<std::int32_t>(filled);
}

}  // namespace avtrain::media
