#include "pack/shard_packer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <new>
#include <thread>

#include "core/error.hpp"
#include "data/shard_writer.hpp"

namespace avtrain::pack {

namespace {

constexpr std::size_t kBlockBytes = std::size_t{256} << 20;  // decoded clips held at once, at most
constexpr std::size_t kWriteBytes = std::size_t{64} << 20;   // clips written to the shard at once, at most

struct ClipResult {
  std::optional<media::DecodedClip> clip;
  std::string reason;   // when !clip
  std::string warning;  // when packed with damaged packets skipped
};

// A stream's damaged packets in the report's words ("audio: 3 of 412 packets damaged, skipped (filled
// with silence)"); past max_damaged of the stream's packets, why the clip is skipped instead.
std::string damage_text(const std::string& stream, const media::PacketCount& p, const char* filled, double max_damaged,
                        bool& over) {
  const std::int64_t packets = std::max(p.packets, p.damaged);
  const double share = packets > 0 ? double(p.damaged) / double(packets) : 0.0;
  over = share > max_damaged;
  std::string text = stream + ": " + std::to_string(p.damaged) + " of " + std::to_string(packets) + " packets damaged";
  if (!over) return text + ", skipped (" + filled + ")";
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, " (%.1f %%), more than --max-damaged %g allows", 100.0 * share, max_damaged);
  return text + numbers + " (" + p.first_error + ")";
}

// The clip's damaged packets against --max-damaged, per stream: a warning, or the reason it is skipped.
void judge_damage(const PackPlan& plan, const ClipEntry& entry, ClipResult& result) {
  const media::DecodedClip& c = *result.clip;
  const std::string audio = entry.audio_path.empty() ? "audio" : "audio (" + entry.audio_path + ")";
  std::string warning, reason;
  const auto judge = [&](const std::string& stream, const media::PacketCount& p, const char* filled) {
    if (p.damaged == 0) return;
    bool over = false;
    const std::string text = damage_text(stream, p, filled, plan.options.max_damaged, over);
    std::string& to = over ? reason : warning;
    to += (to.empty() ? "" : "; ") + text;
  };
  judge("video", c.video_packets, "the previous frame shown");
  judge(audio, c.audio_packets, "filled with silence");
  if (!reason.empty()) {
    result.clip.reset();
    result.reason = reason;
  } else {
    result.warning = warning;
  }
}

// Every shard's header but its path.
data::ShardHeader shard_header(const PackPlan& plan) {
  data::ShardHeader h = data::header_of_shape(plan.options.shape);
  h.version = plan.list.multi_label ? 2 : 1;  // a set of classes a clip (/labels), or one (/label)
  h.num_classes = static_cast<int>(plan.list.class_names.size());
  h.class_names = plan.list.class_names;
  h.packed_with = plan.description().dump();
  return h;
}

ClipResult decode_one(const PackPlan& plan, std::int64_t index) {
  const ClipEntry& entry = plan.list.clips[std::size_t(index)];
  ClipResult result;
  if (!entry.unreadable.empty()) {
    result.reason = entry.unreadable;
    return result;
  }
  try {
    result.clip = media::decode_clip({entry.path, entry.audio_path, entry.start, entry.duration}, plan.options.shape,
                                     plan.options.fail_on_error ? media::OnDamaged::fail : media::OnDamaged::skip);
    judge_damage(plan, entry, result);
  } catch (const media::MediaError& e) {
    result.reason = e.what();
  } catch (const std::bad_alloc&) {
    result.reason = "out of memory decoding the clip";
  } catch (const std::exception& e) {
    result.reason = e.what();
  }
  return result;
}

// The clip's classes in the block: its one class (v1), or its row of the multi-hot /labels (v2).
void add_classes(const PackPlan& plan, const std::vector<int>& classes, data::SampleBlock& block) {
  if (!plan.list.multi_label) {
    block.label.push_back(classes.front());
    return;
  }
  const std::size_t row = block.labels.size();
  block.labels.resize(row + plan.list.class_names.size(), 0);
  for (const int c : classes) block.labels[row + std::size_t(c)] = 1;
}

}  // namespace

ShardPacker::ShardPacker(const PackPlan& plan, int threads)
    : plan_(plan), header_(shard_header(plan)), threads_(std::max(1, threads)) {
  const media::ClipShape& s = plan.options.shape;
  const std::size_t clip_bytes = std::size_t(s.audio_samples) * (s.audio_int16 ? 2 : 4) +
                                 std::size_t(s.frames) * s.height * s.width * s.channels;
  const auto fits = static_cast<int>(std::max<std::size_t>(1, kBlockBytes / std::max<std::size_t>(1, clip_bytes)));
  block_ = std::max(1, std::min(8 * threads_, fits));
  write_clips_ = static_cast<std::int64_t>(std::clamp<std::size_t>(kWriteBytes / std::max<std::size_t>(1, clip_bytes), 1, 64));
}

std::optional<ShardOutcome> ShardPacker::pack(int shard, const std::function<bool(const BlockDone&)>& after_block,
                                              const std::function<bool()>& interrupted) const {
  data::ShardHeader header = header_;
  header.path = plan_.shard_path(shard);
  data::ShardLayout layout;
  layout.gzip = plan_.options.gzip;
  layout.gzip_level = plan_.options.gzip_level;
  layout.zstd_level = plan_.options.zstd_level;
  layout.growable = true;
  layout.sources = true;
  std::unique_ptr<data::ShardWriter> writer;  // opened at the first clip that decodes
  // The clips that decode are written in groups of write_clips_ (whatever the threads, so the file's
  // bytes are the same), each on a thread of its own (HDF5: shuffle and deflate) while the next
  // clips decode; it is the only thread calling HDF5 until it is waited for.
  std::future<void> writing;
  const auto wait_for_write = [&] {
    if (writing.valid()) writing.get();
  };
  data::SampleBlock group;
  const auto write_group = [&] {
    wait_for_write();
    if (!writer) writer = std::make_unique<data::ShardWriter>(header, layout);
    writing = std::async(std::launch::async, [&w = *writer, b = std::move(group)] { w.append(b); });
    group = data::SampleBlock{};
  };
  ShardOutcome outcome;
  outcome.shard = shard;
  const media::ClipShape& s = plan_.options.shape;
  const std::size_t video_row = std::size_t(s.frames) * s.height * s.width * s.channels;
  const auto audio_row = static_cast<std::size_t>(s.audio_samples);

  for (std::int64_t first = plan_.first_clip(shard); first < plan_.end_clip(shard); first += block_) {
    const std::int64_t count = std::min<std::int64_t>(block_, plan_.end_clip(shard) - first);
    std::vector<ClipResult> results(static_cast<std::size_t>(count));
    std::atomic<std::int64_t> next{0};
    std::atomic<bool> stopped{false};
    auto work = [&] {
      for (std::int64_t i; (i = next.fetch_add(1)) < count;) {
        if (interrupted()) {
          stopped = true;
          return;
        }
        results[std::size_t(i)] = decode_one(plan_, first + i);
        if (plan_.options.debug_delay_ms > 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(plan_.options.debug_delay_ms));
      }
    };
    {
      std::vector<std::jthread> workers;
      for (int t = 1; t < std::min<std::int64_t>(threads_, count); ++t) workers.emplace_back(work);
      work();
    }

    BlockDone done;
    const std::size_t failures_before = outcome.failures.size();
    for (std::int64_t i = 0; i < count && !stopped; ++i) {
      ClipResult& r = results[std::size_t(i)];
      const ClipEntry& entry = plan_.list.clips[std::size_t(first + i)];
      if (!r.clip) {
        outcome.failures.push_back({entry.line, entry.path, entry.start, r.reason});
        ++done.skipped;
        continue;
      }
      if (!r.warning.empty()) {
        outcome.warnings.push_back({entry.line, entry.path, entry.start, r.warning});
        ++done.warned;
      }
      const media::DecodedClip& c = *r.clip;
      if (s.audio_int16) group.audio_pcm.insert(group.audio_pcm.end(), c.audio_pcm.begin(), c.audio_pcm.begin() + audio_row);
      else group.audio_float.insert(group.audio_float.end(), c.audio_float.begin(), c.audio_float.begin() + audio_row);
      group.audio_len.push_back(c.audio_len);
      group.video.insert(group.video.end(), c.video.begin(), c.video.begin() + video_row);
      group.video_len.push_back(c.video_len);
      add_classes(plan_, entry.classes, group);
      group.source.push_back(source_text(entry));
      r.clip.reset();
      ++group.count;
      ++done.packed;
      if (group.count == write_clips_) write_group();
    }
    if (done.skipped > 0) done.first_failure = &outcome.failures[failures_before];
    if (!after_block(done) || stopped) {
      wait_for_write();
      return std::nullopt;  // the writer's destructor removes the temporary file
    }
  }
  if (group.count > 0) write_group();
  wait_for_write();
  if (writer) {
    outcome.samples = writer->rows();
    writer->commit();
  }
  return outcome;
}

}  // namespace avtrain::pack
