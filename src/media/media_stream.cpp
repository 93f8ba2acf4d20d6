#include "media/media_stream.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "media/clip.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace avtrain::media {

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text.precision(3);
  text << seconds << " s";
  return text.str();
}

MediaError start_past_the_end(const MediaStream& stream, double start, double end) {
  return MediaError("start " + seconds_text(start) + " is past the end of the " + stream.kind() + " (" +
                    seconds_text(end) + ")");
}

void quiet_ffmpeg_log() { av_log_set_level(AV_LOG_QUIET); }

namespace {

// A decoder's error that says nothing about the packet's data: the clip cannot be decoded at all.
bool not_about_the_data(int code) {
  return code == AVERROR(ENOMEM) || code == AVERROR_PATCHWELCOME || code == AVERROR_BUG || code == AVERROR_BUG2 ||
         code == AVERROR(ENOSYS) || code == AVERROR_EXIT;
}

}  // namespace

MediaStream::MediaStream(const std::string& path, AVMediaType type, OnDamaged on_damaged)
    : type_(type), on_damaged_(on_damaged), damaged_end_(-std::numeric_limits<double>::infinity()) {
  std::error_code ec;
  const bool pattern = path.find('%') != std::string::npos;  // an image sequence, img-%04d.png
  if (!pattern && !std::filesystem::exists(path, ec)) throw MediaError("file not found");
  if (!pattern && std::filesystem::is_directory(path, ec)) throw MediaError("is a directory, not a media file");

  AVFormatContext* format = nullptr;
  int code = avformat_open_input(&format, path.c_str(), nullptr, nullptr);
  if (code < 0) throw MediaError("cannot open: " + av_error_text(code));
  format_.reset(format);
  code = avformat_find_stream_info(format, nullptr);
  if (code < 0) throw MediaError("cannot read the stream information: " + av_error_text(code));

  const AVCodec* codec = nullptr;
  const int index = av_find_best_stream(format, type, -1, -1, &codec, 0);
  if (index == AVERROR_STREAM_NOT_FOUND) throw MediaError(std::string("no ") + kind() + " stream");
  if (index < 0 || codec == nullptr) {
    const AVStream* any = nullptr;
    for (unsigned i = 0; i < format->nb_streams; ++i)
      if (format->streams[i]->codecpar->codec_type == type) any = format->streams[i];
    const char* name = any ? avcodec_get_name(any->codecpar->codec_id) : "?";
    throw MediaError(std::string("no decoder for the ") + kind() + " codec " + name);
  }
  stream_ = format->streams[index];
  for (unsigned i = 0; i < format->nb_streams; ++i)
    if (int(i) != index) format->streams[i]->discard = AVDISCARD_ALL;  // demux only the stream decoded

  decoder_.reset(avcodec_alloc_context3(codec));
  if (!decoder_) throw MediaError("out of memory opening the decoder");
  code = avcodec_parameters_to_context(decoder_.get(), stream_->codecpar);
  if (code < 0) throw MediaError(std::string("cannot set up the ") + kind() + " decoder: " + av_error_text(code));
  decoder_->pkt_timebase = stream_->time_base;
  decoder_->thread_count = 1;  // clips run in parallel instead; the bytes never depend on threading
  code = avcodec_open2(decoder_.get(), codec, nullptr);
  if (code < 0) throw MediaError(std::string("cannot open the ") + codec->name + " decoder: " + av_error_text(code));

  origin_ = format->start_time != AV_NOPTS_VALUE ? double(format->start_time) / AV_TIME_BASE : 0.0;
  packet_.reset(av_packet_alloc());
  frame_.reset(av_frame_alloc());
  if (!packet_ || !frame_) throw MediaError("out of memory opening the decoder");
}

void MediaStream::seek(double seconds) {
  if (seconds <= 0) return;
  const AVRational tb = stream_->time_base;
  const auto target = static_cast<std::int64_t>(std::floor((origin_ + seconds) * tb.den / tb.num));
  if (av_seek_frame(format_.get(), stream_->index, target, AVSEEK_FLAG_BACKWARD) >= 0) {
    avcodec_flush_buffers(decoder_.get());
  }
}

void MediaStream::send_next_packet() {
  while (true) {
    const int code = av_read_frame(format_.get(), packet_.get());
    if (code == AVERROR_EOF) {
      avcodec_send_packet(decoder_.get(), nullptr);  // drain
      flushed_ = true;
      return;
    }
    if (code < 0) {
      throw MediaError("cannot read the " + std::string(kind()) + " after " + seconds_text(last_seconds_) + ": " +
                       av_error_text(code) + " (truncated or damaged file?)");
    }
    if (packet_->stream_index != stream_->index) {
      av_packet_unref(packet_.get());
      continue;
    }
    sent_start_ = packet_->pts != AV_NOPTS_VALUE ? double(packet_->pts) * av_q2d(stream_->time_base) - origin_
                                                 : std::numeric_limits<double>::quiet_NaN();
    sent_seconds_ = packet_seconds(*packet_);
    ++count_.packets;
    sent_since_error_ = true;
    const int sent = avcodec_send_packet(decoder_.get(), packet_.get());
    av_packet_unref(packet_.get());
    if (sent == AVERROR_EOF) {
      throw MediaError("cannot decode the " + std::string(kind()) + " after " + seconds_text(last_seconds_) + ": " +
                       av_error_text(sent));
    }
    // The decoder dropped the packet; it goes on with the next one (as the ffmpeg tool does).
    if (sent < 0 && sent != AVERROR(EAGAIN)) damaged(sent, sent_start_, sent_seconds_);
    return;
  }
}

double MediaStream::packet_seconds(const AVPacket& packet) const {
  if (packet.duration > 0) return double(packet.duration) * av_q2d(stream_->time_base);
  if (type_ == AVMEDIA_TYPE_AUDIO) {
    return decoder_->frame_size > 0 && decoder_->sample_rate > 0 ? double(decoder_->frame_size) / decoder_->sample_rate
                                                                 : 0.0;
  }
  const AVRational rate = av_guess_frame_rate(format_.get(), stream_, nullptr);
  return rate.num > 0 && rate.den > 0 ? av_q2d(av_inv_q(rate)) : 0.0;
}

void MediaStream::damaged(int code, double start, double seconds) {
  if (not_about_the_data(code)) {
    throw MediaError("cannot decode the " + std::string(kind()) + " after " + seconds_text(last_seconds_) + ": " +
                     av_error_text(code));
  }
  if (on_damaged_ == OnDamaged::fail) {
    throw MediaError("cannot decode the " + std::string(kind()) + " packet at " +
                     seconds_text(std::isfinite(start) ? start : last_seconds_) + ": " + av_error_text(code) +
                     " (a damaged packet)");
  }
  ++count_.damaged;
  if (count_.first_error.empty()) count_.first_error = av_error_text(code);
  ++lost_.packets;
  lost_.seconds += seconds;
  if (std::isfinite(start)) damaged_end_ = std::max(damaged_end_, start + seconds);
}

MediaStream::Lost MediaStream::take_lost() {
  const Lost lost = lost_;
  lost_ = Lost{};
  return lost;
}

AVFrame* MediaStream::next_frame() {
  while (true) {
    const int code = avcodec_receive_frame(decoder_.get(), frame_.get());
    if (code == 0) {
      const double t = seconds(frame_.get());
      if (std::isfinite(t)) last_seconds_ = t;
      return frame_.get();
    }
    if (code == AVERROR_EOF) return nullptr;
    if (code != AVERROR(EAGAIN)) {
      // The decoder's error on what it was last sent: that packet is damaged. The same error again
      // without new input would never end: then the stream cannot be decoded further.
      if (!sent_since_error_) {
        throw MediaError("cannot decode the " + std::string(kind()) + " after " + seconds_text(last_seconds_) + ": " +
                         av_error_text(code));
      }
      sent_since_error_ = false;
      damaged(code, sent_start_, sent_seconds_);
      if (flushed_) return nullptr;  // draining: what is left of the stream is lost
      continue;
    }
    if (flushed_) return nullptr;
    send_next_packet();
  }
}

double MediaStream::seconds(const AVFrame* frame) const {
  std::int64_t pts = frame->best_effort_timestamp;
  if (pts == AV_NOPTS_VALUE) pts = frame->pts;
  if (pts == AV_NOPTS_VALUE) return std::numeric_limits<double>::quiet_NaN();
  return double(pts) * av_q2d(stream_->time_base) - origin_;
}

double MediaStream::duration(const AVFrame* frame) const {
  if (type_ == AVMEDIA_TYPE_AUDIO) return frame->sample_rate > 0 ? double(frame->nb_samples) / frame->sample_rate : 0.0;
#if LIBAVUTIL_VERSION_INT >= AV_VERSION_INT(57, 30, 100)
  const std::int64_t ticks = frame->duration;
#else
  const std::int64_t ticks = frame->pkt_duration;
#endif
  if (ticks > 0) return double(ticks) * av_q2d(stream_->time_base);
  const AVRational rate = av_guess_frame_rate(format_.get(), stream_, nullptr);
  return rate.num > 0 && rate.den > 0 ? av_q2d(av_inv_q(rate)) : 0.0;
}

}  // namespace avtrain::media
