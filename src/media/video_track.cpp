#include "media/video_track.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "media/media_stream.hpp"

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace avtrain::media {

namespace {

// Two timestamps this close are the same instant (rounding of time bases).
constexpr double kSameInstant = 1e-6;

// Scales a decoded frame to cover height x width (display aspect kept), then crops the centre.
class FrameConverter {
 public:
  explicit FrameConverter(const ClipShape& shape) : shape_(shape) {}

  void convert(const AVFrame& frame, std::uint8_t* out) {
    const double sar = frame.sample_aspect_ratio.num > 0 && frame.sample_aspect_ratio.den > 0
                           ? av_q2d(frame.sample_aspect_ratio)
                           : 1.0;
    const double display_width = frame.width * sar;
    const double scale = std::max(double(shape_.width) / display_width, double(shape_.height) / frame.height);
    const int sw = std::max(shape_.width, int(std::lround(display_width * scale)));
    const int sh = std::max(shape_.height, int(std::lround(frame.height * scale)));
    const AVPixelFormat target = shape_.channels == 1 ? AV_PIX_FMT_GRAY8 : AV_PIX_FMT_RGB24;
    SwsContext* cached = sws_getCachedContext(scaler_.release(), frame.width, frame.height, AVPixelFormat(frame.format),
                                              sw, sh, target, SWS_AREA | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
    scaler_.reset(cached);
    if (!cached) {
      const char* format = av_get_pix_fmt_name(AVPixelFormat(frame.format));
      throw MediaError(std::string("cannot convert frames of pixel format ") + (format ? format : "?"));
    }
    set_colours(frame);
    const int row = sw * shape_.channels;
    scaled_.resize(std::size_t(row) * sh);
    std::uint8_t* planes[] = {scaled_.data()};
    const int strides[] = {row};
    if (sws_scale(cached, frame.data, frame.linesize, 0, frame.height, planes, strides) != sh)
      throw MediaError("cannot scale a video frame");
    const int x0 = (sw - shape_.width) / 2, y0 = (sh - shape_.height) / 2;
    const std::size_t out_row = std::size_t(shape_.width) * shape_.channels;
    for (int y = 0; y < shape_.height; ++y)
      std::copy_n(scaled_.data() + std::size_t(y0 + y) * row + std::size_t(x0) * shape_.channels, out_row,
                  out + std::size_t(y) * out_row);
  }

 private:
  // The source's matrix (BT.601 unless the stream says otherwise) and range; full-range output.
  void set_colours(const AVFrame& frame) {
    const AVPixelFormat f = AVPixelFormat(frame.format);
    const bool full = frame.color_range == AVCOL_RANGE_JPEG || f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P ||
                      f == AV_PIX_FMT_YUVJ444P || f == AV_PIX_FMT_YUVJ440P;
    const int space = frame.colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : int(frame.colorspace);
    if (scaler_.get() == colours_for_ && space == space_ && full == full_) return;
    int* inv_table = nullptr;
    int* table = nullptr;
    int src_range = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
    if (sws_getColorspaceDetails(scaler_.get(), &inv_table, &src_range, &table, &dst_range, &brightness, &contrast,
                                 &saturation) >= 0) {
      sws_setColorspaceDetails(scaler_.get(), sws_getCoefficients(space), full ? 1 : 0, sws_getCoefficients(SWS_CS_DEFAULT),
                               1, brightness, contrast, saturation);
    }
    colours_for_ = scaler_.get();
    space_ = space;
    full_ = full;
  }

  ClipShape shape_;
  ScalerHandle scaler_;
  std::vector<std::uint8_t> scaled_;
  const SwsContext* colours_for_ = nullptr;
  int space_ = -1;
  bool full_ = false;
};

}  // namespace

void decode_video(const std::string& path, double start, double seconds, const ClipShape& shape, DecodedClip& clip,
                  OnDamaged on_damaged) {
  MediaStream stream(path, AVMEDIA_TYPE_VIDEO, on_damaged);
  stream.seek(start);
  // Targets start + k / fps for k / fps < seconds.
  const int count = std::min(shape.frames, std::max(1, int(std::ceil(seconds * shape.fps - 1e-9))));
  auto target = [&](int k) { return start + double(k) / shape.fps; };
  const std::size_t frame_bytes = std::size_t(shape.height) * shape.width * shape.channels;
  FrameConverter converter(shape);
  FrameHandle held(av_frame_alloc());
  if (!held) throw MediaError("out of memory decoding the video");
  bool have_held = false;
  double held_end = 0;
  int k = 0;
  auto emit = [&](const AVFrame& frame) {
    converter.convert(frame, clip.video.data() + std::size_t(k) * frame_bytes);
    ++k;
  };

  while (k < count) {
    AVFrame* frame = stream.next_frame();
    if (frame == nullptr) break;
    double t = stream.seconds(frame);
    if (!std::isfinite(t)) t = have_held ? held_end : start;
    // Every target before this frame shows the frame before it (or this one, when it is the first).
    while (k < count && t > target(k) + kSameInstant) emit(have_held ? *held : *frame);
    av_frame_unref(held.get());
    const int ref = av_frame_ref(held.get(), frame);
    if (ref < 0) throw MediaError("cannot keep a video frame: " + av_error_text(ref));
    have_held = true;
    held_end = t + stream.duration(frame);
  }
  // The end of the stream: the last frame lasts its duration, and through the damaged packets after
  // it (a damaged frame is the previous one shown longer, here as between frames).
  if (have_held && std::isfinite(stream.damaged_end())) held_end = std::max(held_end, stream.damaged_end());
  while (have_held && k < count && target(k) < held_end - kSameInstant) emit(*held);
  clip.video_packets = stream.packets();
  if (!have_held && stream.packets().damaged > 0) {
    throw MediaError("no video frame decoded: " + std::to_string(stream.packets().damaged) + " of " +
                     std::to_string(stream.packets().packets) + " packets damaged (" + stream.packets().first_error + ")");
  }
  if (!have_held) throw MediaError("no video frame decoded");
  if (k == 0) {
    throw start_past_the_end(stream, start, held_end);
  }
  clip.video_len = k;
}

}  // namespace avtrain::media
