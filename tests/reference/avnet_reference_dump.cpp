// Writes what avtrain computes for one micro-batch, for an independent reference to check:
//   DIR/batch.h5    the micro-batch, as a format-v1 shard (int16 audio, uneven lengths); with
//                   --multi-label a format-v2 shard whose samples hold sets of one to three classes
//   DIR/params.h5   every parameter and BatchNorm statistic by name (float32)
//   DIR/avtrain.h5  attributes loss, ce_loss, nce_loss, the architecture and multi_label (model.task:
//                   the sigmoid binary cross-entropy); datasets logits and grad/<name> for each
//                   trainable parameter
// usage: avnet_reference_dump DIR [--multi-label]
#include <hdf5.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/backend.hpp"
#include "core/keyed_random.hpp"
#include "data/hdf5_id.hpp"
#include "data/shard_set.hpp"
#include "data/shard_writer.hpp"
#include "model/av_net.hpp"

namespace {

using avtrain::data::H5Id;

constexpr int kBatch = 5;

avtrain::ModelConfig architecture() {
  avtrain::ModelConfig m;
  m.width = 32;
  m.depth = 2;
  m.heads = 4;
  m.mlp_ratio = 2;
  m.audio_window = 64;
  m.audio_hop = 32;
  m.mel_bins = 16;
  m.tubelet_frames = 2;
  m.patch = 4;
  m.nce_temperature = 0.2f;
  m.nce_weight = 0.3f;
  m.init_std = 0.1f;
  return m;
}

avtrain::data::ShardHeader batch_header(const std::string& path, bool multi_label) {
  avtrain::data::ShardHeader h;
  h.path = path;
  h.version = multi_label ? 2 : 1;
  h.sample_rate = 4000;
  h.fps = 8;
  h.num_classes = 6;
  h.samples = kBatch;
  h.audio_samples = 1000;
  h.frames = 4;
  h.height = 16;
  h.width = 16;
  h.channels = 3;
  h.audio_int16 = true;
  return h;
}

// Sample b's set under --multi-label: {b, b + 2, b + 3} cut to one to three classes (b % 3 + 1), so that
// sets of every size and classes shared by several samples are in the batch.
void add_label_set(avtrain::data::SampleBlock& block, int b, int classes) {
  for (int k = 0; k <= b % 3; ++k) block.labels[std::size_t(b) * classes + std::size_t((b + (k ? k + 1 : 0)) % classes)] = 1;
}

void write_batch(const std::string& path, bool multi_label) {
  const auto h = batch_header(path, multi_label);
  avtrain::KeyedRandom rng(2024, "reference-batch");
  avtrain::data::SampleBlock block;
  block.count = kBatch;
  block.audio_pcm.assign(std::size_t(kBatch) * h.audio_samples, 0);
  block.video.assign(std::size_t(kBatch) * h.frames * h.height * h.width * h.channels, 0);
  const int audio_lens[kBatch] = {1000, 700, 64, 333, 999};
  const int video_lens[kBatch] = {4, 1, 3, 2, 4};
  const std::size_t frame = std::size_t(h.height) * h.width * h.channels;
  if (multi_label) block.labels.assign(std::size_t(kBatch) * h.num_classes, 0);
  for (int b = 0; b < kBatch; ++b) {
    block.audio_len.push_back(audio_lens[b]);
    block.video_len.push_back(video_lens[b]);
    if (multi_label) add_label_set(block, b, h.num_classes);
    else block.label.push_back(b % h.num_classes);
    for (int i = 0; i < audio_lens[b]; ++i)
      block.audio_pcm[std::size_t(b) * h.audio_samples + i] = std::int16_t(rng.integer(-20000, 20000));
    for (std::size_t i = 0; i < video_lens[b] * frame; ++i)
      block.video[std::size_t(b) * h.frames * frame + i] = std::uint8_t(rng.integer(0, 255));
  }
  avtrain::data::ShardWriter writer(h, false);
  writer.write(0, block);
  writer.commit();
}

void write_dataset(hid_t file, const std::string& name, const float* data, const std::vector<int>& shape,
                   bool as_double) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  std::size_t n = 1;
  for (int d : shape) n *= std::size_t(d);
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  H5Id space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id set(H5Dcreate2(file, name.c_str(), as_double ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, space.get(), lcpl.get(),
                      H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  if (as_double) {
    std::vector<double> d(data, data + n);
    H5Dwrite(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.data());
  } else {
    H5Dwrite(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  }
}

template <class T>
void write_attribute(hid_t file, const char* name, T value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const hid_t type = std::is_floating_point_v<T> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT;
  H5Id attr(H5Acreate2(file, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if constexpr (std::is_floating_point_v<T>) {
    double v = value;
    H5Awrite(attr.get(), type, &v);
  } else {
    int v = value;
    H5Awrite(attr.get(), type, &v);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool multi_label = argc == 3 && std::string(argv[2]) == "--multi-label";
  if (argc != 2 && !multi_label) {
    std::fprintf(stderr, "usage: avnet_reference_dump DIR [--multi-label]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir + "/batch");
  write_batch(dir + "/batch/batch.h5", multi_label);
  auto shards = avtrain::data::ShardSet::open(dir + "/batch");
  avtrain::data::MicroBatch batch = shards->read({0, 1, 2, 3, 4});

  auto be = avtrain::make_cpu_backend();
  be->set_threads(1);
  avtrain::ModelConfig m = architecture();
  if (multi_label) m.task = avtrain::Task::multi_label;
  avtrain::ParamStore params;
  avtrain::AVNet net(*be, params, m, shards->info());
  params.allocate(99);
  auto states = net.make_states();
  avtrain::Flow flow;
  flow.batch = &batch;
  net.forward(flow, states);
  net.backward(flow, states);

  H5Id pfile(H5Fcreate((dir + "/params.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  H5Id out(H5Fcreate((dir + "/avtrain.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  for (avtrain::ParamId id = 0; id < avtrain::ParamId(params.params().size()); ++id) {
    const avtrain::ParamInfo& p = params.info(id);
    write_dataset(pfile.get(), p.name, params.value(id), p.shape, false);
    if (p.trainable) write_dataset(out.get(), "grad/" + p.name, params.grad(id), p.shape, true);
  }
  write_attribute(out.get(), "loss", flow.loss);
  write_attribute(out.get(), "ce_loss", flow.ce_loss);
  write_attribute(out.get(), "nce_loss", flow.nce_loss);
  write_attribute(out.get(), "width", m.width);
  write_attribute(out.get(), "depth", m.depth);
  write_attribute(out.get(), "heads", m.heads);
  write_attribute(out.get(), "mlp_ratio", m.mlp_ratio);
  write_attribute(out.get(), "window", m.audio_window);
  write_attribute(out.get(), "hop", m.audio_hop);
  write_attribute(out.get(), "mel", m.mel_bins);
  write_attribute(out.get(), "tubelet", m.tubelet_frames);
  write_attribute(out.get(), "patch", m.patch);
  write_attribute(out.get(), "nce_weight", double(m.nce_weight));
  write_attribute(out.get(), "nce_temperature", double(m.nce_temperature));
  write_attribute(out.get(), "multi_label", int(multi_label));
  std::printf("avtrain: loss %.9g (ce %.9g, nce %.9g) for %d samples in %s\n", flow.loss, flow.ce_loss, flow.nce_loss,
              batch.size, dir.c_str());
  return 0;
}
