#include "io/tensorboard_writer.hpp"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "tensorboard_event.pb.h"

namespace avtrain {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = "";
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  return name;
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
}  // namespace

std::uint32_t masked_crc32c(std::string_view bytes) {
  // CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, initial and final XOR 0xFFFFFFFF.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  const std::uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void remove_event_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > 8 && name.substr(name.size() - 8) == ".avtrain")
      std::filesystem::remove(entry.path(), ec);
  }
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create output directory " + dir + ": " + ec.message());
  const auto seconds = static_cast<long long>(now_s());
  path_ = dir + "/events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." +
          std::to_string(getpid()) + ".avtrain";
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  tensorboard::Event version;
  version.set_wall_time(now_s());
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_step(const StepRow& row, const std::vector<LayerRow>& layers) {
  tensorboard::Event event;
  event.set_wall_time(now_s());
  event.set_step(static_cast<std::int64_t>(row["step"]));
  tensorboard::Summary* summary = event.mutable_summary();
  for (std::size_t i = 0; i < StepRow::kCount; ++i) {
    const std::string name = kStepColumns[i].name;
    if (name == "step" || !row.at(i)) continue;
    tensorboard::SummaryValue* v = summary->add_value();
    v->set_tag("trace/" + name);
    v->set_simple_value(static_cast<float>(*row.at(i)));
  }
  double total = 0;
  for (const LayerRow& l : layers) total += l.grad_norm * l.grad_norm;
  if (total > 0 && std::isfinite(total))
    for (const LayerRow& l : layers) {
      tensorboard::SummaryValue* v = summary->add_value();
      v->set_tag("grad_share/" + l.layer);
      v->set_simple_value(static_cast<float>(l.grad_norm * l.grad_norm / total));
    }
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string record;
  put_le(record, event.size(), 8);
  put_le(record, masked_crc32c(record), 4);
  record += event;
  put_le(record, masked_crc32c(event), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw Error("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace avtrain
