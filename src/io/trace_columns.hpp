#pragma once
// The columns of the traces, one table per file and each column once: its name, how its numbers
// are written, whether it may be empty, and what it means. The files' headers, the rows written,
// the rank reports that every rank sends rank 0 (train/rank_report) and the column lists of
// docs/traces.md (trace_columns_markdown(), which a test holds the docs to) all come from these
// tables. A row of trace.csv or ranks.csv is a TraceRow: a value per column, set and read by the
// column's name, which is checked when the program is compiled. Adding a per-rank column is a line
// here and the line that measures it.
//
// Formats: "%.17g" a double that reads back to its bits, "%.9g" a float's, "%.6f" times (ms) and
// shares, "%.0f" counts and indices (exact: every count here stays below 2^53).
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace avtrain {

struct TraceColumn {
  const char* name;
  const char* format;
  bool may_be_empty;  // written as an empty field when the row holds no value
  double initial;     // a row's value before it is set (columns that may not be empty)
  const char* meaning;
};

// trace.csv: one row per optimizer step, written by rank 0 from every rank's report.
inline constexpr TraceColumn kStepColumns[] = {
    {"step", "%.0f", false, 0, "0-based step"},
    {"epoch", "%.0f", false, 0,
     "epoch of the step's samples (an epoch drops the remainder that does not fill a global batch)"},
    {"loss", "%.17g", false, 0,
     "mean over the step's micro-batches (of every replica) of ce_weight·cross-entropy + nce_weight·InfoNCE "
     "(unscaled)"},
    {"grad_norm", "%.17g", false, 0,
     "global L2 norm of the gradients over every stage, each parameter once (unscaled), before clipping; inf/nan on "
     "a skipped step"},
    {"loss_scale", "%.17g", false, 1, "loss scale the step's backward used (1 in FP32 and without scaling)"},
    {"skipped", "%.0f", false, 0,
     "1 when the step was skipped for non-finite gradients (fp16/bf16; in FP32 a non-finite loss or gradient stops "
     "the run with the step and layers named)"},
    {"lr", "%.9g", false, 0,
     "learning rate the update used (0 on a skipped step; skipped steps do not advance the schedule)"},
    {"step_ms", "%.17g", false, 0,
     "wall time of the step's training part (reading, forward, backward, update; validation excluded), largest over "
     "the ranks"},
    {"data_wait_ms", "%.17g", false, 0, "time the step waited for the prefetch thread, largest over the ranks"},
    {"comm_ms", "%.17g", false, 0,
     "gradient all-reduce not hidden behind backward: the wait of the replica that finished backward last, largest "
     "over the stages (0 on one rank)"},
    {"samples_per_s", "%.17g", false, 0, "global batch / step time"},
    {"mem_peak_mb", "%.17g", false, 0,
     "peak so far of the memory the model holds: parameters, main grads, AdamW moments, working copies, the "
     "activations of a micro-batch, the shared fp32 scratch; on a GPU the high-water mark of the device arena "
     "(everything the rank's tensors and the backend's scratch took)"},
    {"act_mb", "%.17g", false, 0,
     "activations the layers keep for backward, for every micro-batch in flight at once (1F1B: at most pp − stage; "
     "GPipe: all), largest over the ranks (halves in fp16/bf16; less under `train.recompute`, docs/recompute.md)"},
    {"bubble", "%.6f", false, 0,
     "pipeline idle share: time a stage waited for its neighbours inside the schedule over the schedule's time, "
     "largest over the ranks (0 at pp = 1)"},
    {"bubble_theory", "%.6f", false, 0, "(pp − 1)/(m + pp − 1), m = micro-batches per replica"},
    {"val_loss", "%.17g", true, 0,
     "classification cross-entropy (multi-label: binary cross-entropy) on the validation split; empty on steps without evaluation (every "
     "`train.eval_interval` steps and the last)"},
    {"val_acc", "%.17g", true, 0,
     "top-1 accuracy on the validation split: the share of samples whose first arg-max class is theirs (multi-label: "
     "one of theirs); empty on steps without evaluation"},
    {"val_top5", "%.17g", true, 0,
     "top-5 accuracy: the share of samples with one of their classes among the 5 highest logits; empty on steps "
     "without evaluation"},
    {"val_map", "%.17g", true, 0,
     "mAP: the mean over classes with a positive sample of the average precision of the logits over the whole "
     "validation split (sklearn's average_precision_score; docs/metrics.md); empty on steps without evaluation"},
    {"val_auc", "%.17g", true, 0,
     "the mean over classes with positive and negative samples of the ROC AUC (sklearn's roc_auc_score); empty on "
     "steps without evaluation"},
    {"val_dprime", "%.17g", true, 0, "d′ = √2 Φ⁻¹(val_auc); empty on steps without evaluation"},
};

// ranks.csv: one row per step and rank, as that rank measured it.
inline constexpr TraceColumn kRankColumns[] = {
    {"step", "%.0f", false, 0, "0-based step"},
    {"rank", "%.0f", false, 0, "the rank (rank = pp_rank × dp × cp + dp_rank × cp + cp_rank)"},
    {"pp_rank", "%.0f", false, 0, "its pipeline stage"},
    {"dp_rank", "%.0f", false, 0, "its replica within the stage"},
    {"cp_rank", "%.0f", false, 0, "its part of the replica's tokens (parallel.cp; 0 at cp 1)"},
    {"local_loss", "%.17g", true, 0, "last stages only: mean loss of this replica's micro-batches (empty elsewhere)"},
    {"loss_scale", "%.17g", false, 1, "the scale this rank used (the same on every rank, always)"},
    {"grad_norm_local", "%.17g", false, 0,
     "norm of this rank's own gradient over its stage before the data-parallel all-reduce (unscaled; at dp x cp = 1 "
     "the stage's gradient)"},
    {"act_mb", "%.6f", false, 0, "activations this rank held for backward (its micro-batches in flight)"},
    {"step_ms", "%.6f", false, 0, "the rank's step"},
    {"schedule_ms", "%.6f", false, 0, "its schedule (first forward to last backward)"},
    {"idle_ms", "%.6f", false, 0, "time inside the schedule spent waiting for a neighbour stage"},
    {"comm_ms", "%.6f", false, 0,
     "time waiting for the gradient all-reduce after backward (imbalance between replicas included)"},
    {"data_wait_ms", "%.6f", false, 0, "time waiting for the prefetch thread"},
    {"optimizer_ms", "%.6f", false, 0,
     "the update: AdamW (or a skipped step), the BatchNorm statistics' all-reduce, under ZeRO the weights' "
     "all-gather, the gradients zeroed"},
    {"grad_bytes", "%.0f", false, 0,
     "payload bytes handed to the gradient all-reduce (halved by fp16/bf16 communication); under `parallel.zero 1` "
     "the reduce-scatter and the weights' all-gather, each counted as half its buffer"},
    {"cp_bytes", "%.0f", false, 0,
     "parallel.cp: bytes this rank sent to the other parts of its samples' tokens in the step (the Ulysses all-to-alls around attention, forward and backward, and the head's pooled sums); 0 at cp 1"},
    {"cp_ms", "%.6f", false, 0, "parallel.cp: time in those exchanges, the transposes around each all-to-all included"},
};

// layers.csv: one row per step and module (rows are LayerRow, io/trace_writer.hpp).
inline constexpr TraceColumn kLayerColumns[] = {
    {"step", "%.0f", false, 0, "0-based step"},
    {"layer", "%s", false, 0, "the module (the parameter group), in model order"},
    {"grad_norm", "%.17g", false, 0,
     "L2 norm of the module's gradients before clipping (accumulated over micro-batches)"},
    {"param_norm", "%.17g", false, 0, "L2 norm of its parameters before the update"},
    {"act_absmax", "%.9g", true, 0,
     "largest \\|value\\| of the module's output over the step's micro-batches (`audio.bn`: after GELU; `mlp.fc1`: "
     "before GELU; `attn.proj`: before the residual add; `embed`: the tokens entering the blocks); empty where not "
     "measured"},
    {"grad_underflow_frac", "%.17g", false, 0,
     "share of the module's gradient values, as accumulated (scaled by the loss scale), below the compute type's "
     "smallest normal — 2⁻¹⁴ for fp16, 2⁻¹²⁶ for bf16; FP32 runs report against fp16's — zeros included"},
    {"nonfinite", "%.0f", false, 0, "count of inf/NaN gradient values"},
    // precision.mode fp8: what the casts of each FP8 linear's three tensors did (LayerRow::fp8, in
    // kFp8LayerColumns' order); empty in the rows of other modules and of other modes.
    {"fp8_x_amax", "%.9g", true, 0,
     "FP8 linears only (empty elsewhere): largest \\|value\\| of the input x the step quantized, over its "
     "micro-batches and replicas: the amax its delayed scaling records"},
    {"fp8_x_scale", "%.9g", true, 0,
     "the scale x was quantized with in the step: E4M3 codes of x · scale (a fresh start's first step, where each "
     "micro-batch takes its own just in time: the one of the largest amax)"},
    {"fp8_x_underflow", "%.17g", true, 0,
     "share of x's values cast in the step that were non-zero and became zero (a zero code)"},
    {"fp8_x_saturated", "%.17g", true, 0,
     "share of x's values cast in the step with \\|x · scale\\| above E4M3's largest, 448 (cast to ±448; ±inf "
     "included)"},
    {"fp8_x_range", "%.9g", true, 0,
     "dynamic range of x in the step in bits: log2(amax) − log2(smallest non-zero \\|x\\|) (E4M3 holds 17.8: "
     "2⁻⁹ to 448); empty where no value was non-zero"},
    {"fp8_w_amax", "%.9g", true, 0, "the same for the weight W (its bf16 working copy, E4M3)"},
    {"fp8_w_scale", "%.9g", true, 0, "W's scale"},
    {"fp8_w_underflow", "%.17g", true, 0, "W's underflow share"},
    {"fp8_w_saturated", "%.17g", true, 0, "W's saturation share (above 448)"},
    {"fp8_w_range", "%.9g", true, 0, "W's dynamic range"},
    {"fp8_dy_amax", "%.9g", true, 0,
     "the same for the output gradient dy (as scaled by the loss scale, E5M2: its largest is 57344, it holds "
     "31.8 bits, 2⁻¹⁶ to 57344)"},
    {"fp8_dy_scale", "%.9g", true, 0, "dy's scale"},
    {"fp8_dy_underflow", "%.17g", true, 0, "dy's underflow share"},
    {"fp8_dy_saturated", "%.17g", true, 0, "dy's saturation share (above 57344)"},
    {"fp8_dy_range", "%.9g", true, 0, "dy's dynamic range"},
};
// Where the fp8 columns start in kLayerColumns, and how many there are: 5 for each of x, W, dy.
inline constexpr std::size_t kFp8LayerColumnsFirst = 7;
inline constexpr std::size_t kFp8LayerColumnsPerTensor = 5;
inline constexpr std::size_t kFp8LayerColumns = 3 * kFp8LayerColumnsPerTensor;

// A row of a table of columns: a value, or none (an empty field), per column.
template <const auto& Columns>
class TraceRow {
 public:
  static constexpr std::size_t kCount = std::size(Columns);
  // A column named when the program is compiled: a name not in the table does not compile.
  struct Column {
    consteval Column(const char* name) : index(find(name)) {}
    std::size_t index;
  };

  TraceRow() {
    for (std::size_t i = 0; i < kCount; ++i)
      if (!Columns[i].may_be_empty) values_[i] = Columns[i].initial;
  }
  void set(Column c, double value) { values_[c.index] = value; }
  void add(Column c, double value) { values_[c.index] = (*this)[c] + value; }
  void clear(Column c) { values_[c.index].reset(); }
  bool has(Column c) const { return values_[c.index].has_value(); }
  // The value (the column's initial value where none was set).
  double operator[](Column c) const { return values_[c.index].value_or(Columns[c.index].initial); }
  // By position, in the table's order: what the writers and the rank reports iterate over.
  const std::optional<double>& at(std::size_t i) const { return values_[i]; }
  std::optional<double>& at(std::size_t i) { return values_[i]; }

 private:
  static consteval std::size_t find(const char* name) {
    std::size_t i = 0;  // no throw as the last statement: gcc 10 refuses such a consteval function
    while (i < kCount && std::string_view(Columns[i].name) != name) ++i;
    if (i == kCount) throw "no trace column of that name";  // a compile error where it is used
    return i;
  }
  std::array<std::optional<double>, kCount> values_;
};

using StepRow = TraceRow<kStepColumns>;
using RankRow = TraceRow<kRankColumns>;

// The header line of a table ("step,epoch,...") and a row's fields in its formats.
template <std::size_t N>
std::string trace_header(const TraceColumn (&columns)[N]) {
  std::string line;
  for (std::size_t i = 0; i < N; ++i) line += (i ? "," : "") + std::string(columns[i].name);
  return line;
}
std::string format_field(const TraceColumn& column, const std::optional<double>& value);
template <const auto& Columns>
std::string trace_line(const TraceRow<Columns>& row) {
  std::string line;
  for (std::size_t i = 0; i < TraceRow<Columns>::kCount; ++i) line += (i ? "," : "") + format_field(Columns[i], row.at(i));
  return line;
}

// docs/traces.md's list of a table: "| column | meaning |" and a row per column.
template <std::size_t N>
std::string trace_columns_markdown(const TraceColumn (&columns)[N]) {
  std::string text = "| column | meaning |\n|---|---|\n";
  for (std::size_t i = 0; i < N; ++i)
    text += "| `" + std::string(columns[i].name) + "` | " + columns[i].meaning + " |\n";
  return text;
}

}  // namespace avtrain
