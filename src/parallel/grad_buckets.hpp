#pragma once
// The data-parallel gradient all-reduce, in buckets. The flat fp32 gradient buffer of a stage is cut,
// from its end (the last layer's parameters, whose gradients backward finishes first), into buckets
// of whole parameters of about bucket_mb each. Backward reports how far its gradients are final;
// every bucket lying wholly in the final part is launched at once as a non-blocking all-reduce, so
// the transfer overlaps the rest of backward. A bucket is divided by dp first (the average; as in
// PyTorch's compression hooks, before a 16-bit cast, so the sum cannot overflow), cast to the wire
// type when that is fp16/bf16, summed over the group, and written back into the fp32 buffer. The
// buffers are tensor memory: the casts and scalings are backend ops, and the group's communicator
// moves that memory (MPI host memory, NCCL device memory).
// Under ZeRO stage 1 (`parts`: the replicas' parts of the buffer, parallel/zero_parts.hpp) a bucket is
// reduce-scattered instead: each replica gets the averages of its own part of the bucket, and the
// rest of its buffer is left undefined.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "core/dtype.hpp"
#include "parallel/communicator.hpp"

namespace avtrain::parallel {

class GradBuckets {
 public:
  // param_bounds: the offsets where parameters begin in `grads`, ascending, then the buffer's size.
  // sample_parts (parallel.cp): members of the group whose gradients are parts of the same samples',
  // summed before the average over the group's size / sample_parts replicas.
  GradBuckets(Backend& be, float* grads, std::vector<std::size_t> param_bounds, double bucket_mb, DType wire,
              Communicator& group, std::vector<std::size_t> parts = {}, int sample_parts = 1);
  std::size_t count() const { return buckets_.size(); }

  void start_step();
  // Gradients at [offset, end of buffer) are final: launches the buckets that lie wholly there.
  void ready_from(std::size_t offset);
  // Lets launched all-reduces progress (MPI moves non-blocking collectives when called).
  void progress();
  // Launches what is left, waits for every bucket and writes the averages into the fp32 buffer (its
  // own part under ZeRO).
  // waiting_for(k), if given, is called before waiting for bucket k (what a watchdog reports).
  void finish(const std::function<void(std::size_t)>& waiting_for = {});
  // Sum of squares of this rank's own gradients (before the all-reduce), over the launched buckets;
  // 0 in a group of one, where nothing is reduced. Added up on the backend as the buckets launch
  // (nothing waits for it during backward), read back here.
  double local_sum_squares() const;

 private:
  struct Bucket {
    std::size_t begin = 0, end = 0;
    std::vector<std::size_t> parts;  // ZeRO: the replicas' parts of the bucket, from its begin
    Buffer16 wire;  // the 16-bit copy that travels, when the wire type is 16-bit
    Request request;
    bool launched = false;
  };
  void launch(Bucket& b);

  Backend& be_;
  float* grads_;
  DType wire_;
  Communicator& group_;
  int replicas_;                 // the group's size / sample_parts: what the sum is divided by
  bool scatter_;                 // reduce-scatter (ZeRO) instead of all-reduce
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start
  std::size_t next_ = 0;         // first bucket not launched
  AlignedArray<double> local_sum_squares_;  // one value, in tensor memory
};

}  // namespace avtrain::parallel
