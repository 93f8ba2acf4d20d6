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
  // Packets that failed to decode since the caller last took them (take_lost), and how long they last.
  struct Lost {
    std::int64_t packets = 0;
    double seconds = 0;  // their durations summed (from the packets, else the codec's frame size or rate)
  };

  // Opens `path` and its best stream of `type` (AVMEDIA_TYPE_AUDIO or AVMEDIA_TYPE_VIDEO) with a
  // single-threaded decoder. Throws MediaError: "file not found", "cannot open: ...", "no audio stream", ...
  // on_damaged: a packet the decoder refuses as bad data is skipped and counted, or throws MediaError.
  MediaStream(const std::string& path, AVMediaType type, OnDamaged on_damaged = OnDamaged::skip);

  // Moves to the last key frame at or before `seconds` (a failed seek leaves the stream at its start).
  void seek(double seconds);
  // The next decoded frame (owned by the stream, valid until the next call), or nullptr at the end.
  // Throws MediaError when the file cannot be read, or the decoder fails for another reason than bad
  // data (out of memory, an unsupported feature), or at a damaged packet with OnDamaged::fail. A
  // damaged packet is otherwise skipped, as the ffmpeg tool does: the decoder goes on with the next.
  AVFrame* next_frame();

  // The packets sent to the decoder so far and the damaged ones.
  const PacketCount& packets() const { return count_; }
  // The damaged packets since the last call (the gap before the frame just returned, or at the end).
  Lost take_lost();
  // The end of the latest damaged packet, seconds from the beginning of the media (-inf: none).
  double damaged_end() const { return damaged_end_; }

  // The frame's presentation time in seconds from the beginning of the media; NaN when it has none.
  double seconds(const AVFrame* frame) const;
  // How long the frame is shown or lasts, in seconds (from the frame, else the stream's rate).
  double duration(const AVFrame* frame) const;
  const AVCodecContext& decoder() const { return *decoder_; }
  const AVStream& stream() const { return *stream_; }
  const char* kind() const { return type_ == AVMEDIA_TYPE_AUDIO ? "audio" : "video"; }

 private:
  void send_next_packet();  // at the end of the file the decoder is sent its flush (flushed_)
  // A decode error: counted as a damaged packet (start, seconds: the packet's time and duration), or
  // thrown (OnDamaged::fail, or an error that is not about the data).
  void damaged(int code, double start, double seconds);
  double packet_seconds(const AVPacket& packet) const;  // its duration

  AVMediaType type_;
  FormatHandle format_;
  CodecHandle decoder_;
  AVStream* stream_ = nullptr;
  PacketHandle packet_;
  FrameHandle frame_;
  double origin_ = 0;  // the media's start time, seconds
  bool flushed_ = false;
  double last_seconds_ = 0;  // the last frame's time, for messages
  OnDamaged on_damaged_;
  PacketCount count_;
  Lost lost_;
  double damaged_end_;
  double sent_start_ = 0, sent_seconds_ = 0;  // the last packet sent: its time and duration
  bool sent_since_error_ = true;               // a packet was sent since the decoder's last error
};

}  // namespace avtrain::media
