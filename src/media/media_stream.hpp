#pragma once
// One audio or video stream of a media file, demuxed and decoded frame by frame with FFmpeg.
#include <string>

#include "media/clip.hpp"
#include "media/ffmpeg_handles.hpp"

namespace avtrain::media {

class MediaStream;

// "1.52 s", for messages.
std::string seconds_text(double seconds);
// "start 9 s is past the end of the video (1.52 s)".
MediaError start_past_the_end(const MediaStream& stream, double start, double end);

class MediaStream {
 public:
  // Opens `path` and its best stream of `type` (AVMEDIA_TYPE_AUDIO or AVMEDIA_TYPE_VIDEO) with a
  // single-threaded decoder. Throws MediaError: "file not found", "cannot open: ...", "no audio stream", ...
  MediaStream(const std::string& path, AVMediaType type);

  // Moves to the last key frame at or before `seconds` (a failed seek leaves the stream at its start).
  void seek(double seconds);
  // The next decoded frame (owned by the stream, valid until the next call), or nullptr at the end.
  // Throws MediaError when the file cannot be read or the decoder refuses it.
  AVFrame* next_frame();

  // The frame's presentation time in seconds from the beginning of the media; NaN when it has none.
  double seconds(const AVFrame* frame) const;
  // How long the frame is shown or lasts, in seconds (from the frame, else the stream's rate).
  double duration(const AVFrame* frame) const;
  const AVCodecContext& decoder() const { return *decoder_; }
  const AVStream& stream() const { return *stream_; }
  const char* kind() const { return type_ == AVMEDIA_TYPE_AUDIO ? "audio" : "video"; }

 private:
  void send_next_packet();  // at the end of the file the decoder is sent its flush (flushed_)

  AVMediaType type_;
  FormatHandle format_;
  CodecHandle decoder_;
  AVStream* stream_ = nullptr;
  PacketHandle packet_;
  FrameHandle frame_;
  double origin_ = 0;  // the media's start time, seconds
  bool flushed_ = false;
  double last_seconds_ = 0;  // the last frame's time, for messages
};

}  // namespace avtrain::media
