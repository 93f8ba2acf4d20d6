#pragma once
// TensorBoard event files beside trace.csv, written as the run goes (rank 0): every number of a
// trace.csv row as the scalar "trace/COLUMN", and each module's share of the squared gradient norm as
// "grad_share/MODULE" (its grad_norm^2 over the sum of them; the shares of a step add up to 1).
// `tensorboard --logdir OUT` (or the folder above several runs) shows them.
//
// The file is TensorFlow's record format: for each Event, its length (8 bytes, little-endian), the
// masked CRC-32C of those 8 bytes, the serialized Event, the masked CRC-32C of it. The first Event
// names the file version ("brain.Event:2"). A resumed run starts a new file; its steps, lower than
// the last ones of the file before, make TensorBoard drop the older file's later steps, as trace.csv
// drops its rows past the checkpoint.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/trace_columns.hpp"
#include "io/trace_writer.hpp"

namespace avtrain {

// The CRC-32C of `bytes` as the record format stores it: rotated right by 15 bits plus 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view bytes);

// Removes the event files a TensorBoardWriter wrote into DIR.
void remove_event_files(const std::string& dir);

class TensorBoardWriter {
 public:
  // Opens DIR/events.out.tfevents.SECONDS.HOST.PID.avtrain (DIR created) and writes the version event.
  explicit TensorBoardWriter(const std::string& dir);
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  // One step: its trace.csv numbers and its modules' gradient shares, one Event, flushed.
  void write_step(const StepRow& row, const std::vector<LayerRow>& layers);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace avtrain
