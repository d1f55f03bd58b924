#pragma once
// Reads a model's tensors out of its GGUF file for the blocks that use them:
// each is checked (present, shape, a type the backend runs) and registered;
// place() then puts them where the backend reads them (model/weights.h says
// where and why) and points every registered matrix and vector at its memory.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/backend.h"
#include "gguf/gguf_file.h"
#include "model/model_options.h"
#include "parallel/rank_layout.h"

namespace ds {

// n f32 values in the backend's memory; empty when the model has none.
struct WeightVector {
  const float* data = nullptr;
  int64_t n = 0;
  bool empty() const { return n == 0; }
};

// A matrix of the model and where it came from: rows [first_row, first_row +
// matrix->n_rows) of the file's tensor (an expert of a stacked tensor, a head
// of kv_b); what calibration names a matmul's weights by.
struct NamedMatrix {
  std::string tensor;
  int64_t first_row = 0;
  const WeightMatrix* matrix = nullptr;
};

// Every out pointer given to the loader must stay where it is until place() returns.
// Under tensor parallel (ranks split) a tensor read with a Split is this
// rank's part of the file's: the shapes given are the part's.
class TensorLoader {
 public:
  TensorLoader(const GgufFile& file, Backend& backend, RankLayout ranks = {}) : file_(file), backend_(backend), ranks_(ranks) {}

  // A tensor of the file, or null; asking for a name counts it as one the model reads (see unread()).
  const GgufTensorInfo* find(const std::string& name) const;

  // A matrix of n_rows rows of n_cols elements (GGUF ne = {n_cols, n_rows}).
  // A matrix read row by row (the embedding lookup), not multiplied, keeps the file's layout.
  // split rows: the file's has n_rows per rank; columns: n_cols per rank (a
  // copy made at load, the columns in whole blocks of the type); never slices.
  Status matrix(const std::string& name, int64_t n_rows, int64_t n_cols, WeightMatrix* out, bool for_matmul = true,
                Split split = Split::none);
  // n values (F32, F16 or BF16 in the file) as f32; `optional`: absent leaves
  // *out empty; split rows: the file's has n per rank.
  Status vector(const std::string& name, int64_t n, WeightVector* out, bool optional = false, Split split = Split::none);
  // A small 2-D table of n_rows rows of n_cols (a float or block type) as one f32 vector, rows in order.
  Status table(const std::string& name, int64_t n_rows, int64_t n_cols, WeightVector* out);
  // An I32 table of n_rows rows of n_cols (GGUF ne = {n_cols, n_rows}) into
  // host memory, each value checked to lie in [0, bound).
  Status integers(const std::string& name, int64_t n_rows, int64_t n_cols, int64_t bound, std::vector<int32_t>* out) const;
  // The tensor holding n_slices matrices of n_rows x n_cols stacked (GGUF ne
  // = {n_cols, n_rows, n_slices}; n_slices = 1 allows a 2-D tensor), checked.
  Result<const GgufTensorInfo*> stacked(const std::string& name, int64_t n_slices, int64_t n_rows, int64_t n_cols) const;
  // Each stacked matrix as a matrix of the model (split rows or columns: n_rows
  // or n_cols per rank each; slices: this rank's part of them, the others'
  // left without data).
  Status slices(const std::string& name, int64_t n_slices, int64_t n_rows, int64_t n_cols, std::vector<WeightMatrix>* out,
                Split split = Split::none);
  // Rows [first, first + n) of a 2-D tensor already checked, as a matrix.
  Status rows(const GgufTensorInfo* t, int64_t first, int64_t n, WeightMatrix* out, bool for_matmul = true);
  // Rows [first, first + n) of a 2-D tensor already checked, transposed into
  // a matrix made at load of ne[0] rows of n: 16- and 32-bit types keep their
  // type (exact), block types become f32 (their exact values). I8 is refused.
  Status transposed_rows(const GgufTensorInfo* t, int64_t first, int64_t n, WeightMatrix* out);

  // Puts every registered tensor in one allocation of the backend's memory
  // (or leaves it in the mapping) and points the weights at it; total_bytes:
  // the file's bytes of all matrices.
  Status place(LoadMode mode, bool interleave, DeviceBuffer* memory, size_t* total_bytes);
  // Every matrix read from the file (not those made at load), after place().
  std::vector<NamedMatrix> take_named() { return std::move(named_); }
  // The file's tensors no one asked for (in file order). A model that loads without one of
  // its file's tensors computes something else than its authors meant (Llama 3's rope_freqs
  // was one): the model refuses the file, as llama.cpp does.
  std::vector<std::string> unread() const;

 private:
  Status check_type(const std::string& name, const GgufTensorInfo& t) const;
  // Values [first, first + n) of tensor t (shape checked), staged for the backend's memory.
  Status values(const std::string& name, const GgufTensorInfo* t, int64_t first, int64_t n, WeightVector* out, bool optional);
  // Columns [first_col, first_col + n_cols) of rows [first_row, first_row +
  // n_rows) of a tensor already checked, as a matrix made at load in the tensor's type.
  Status columns(const GgufTensorInfo* t, int64_t first_row, int64_t n_rows, int64_t first_col, int64_t n_cols, WeightMatrix* out);
  // A W8A8 matrix's scales: tensor NAME_scale, F32, one per row of NAME.
  Status row_scales(const GgufTensorInfo& t, int64_t first, int64_t n, WeightMatrix* out);
  // A matrix made at load from host bytes in the row layout; `interleave`:
  // stored in the backend's own layout where it has one (place's interleave on).
  void derived(DType type, int64_t n_rows, int64_t n_cols, std::vector<uint8_t> bytes, WeightMatrix* out, bool interleave = false);

  struct Placed {
    WeightMatrix* matrix;
    const GgufTensorInfo* info;
    size_t offset;    // of the matrix's first row in the tensor
    bool interleave;  // the backend would store it in its own layout
    bool matmul;      // a matrix multiply reads it (else rows are looked up)
  };
  // Host data bound for the backend's memory: a vector's values or a derived matrix.
  struct Staged {
    const float** vector;
    WeightMatrix* matrix;
    const uint8_t* host;
    size_t n_bytes;
    const int32_t** integers = nullptr;  // a W8A8 matrix's zero points
    bool interleave = false;             // a derived matrix the backend may store in its layout
  };
  const GgufFile& file_;
  Backend& backend_;
  RankLayout ranks_;
  mutable std::set<std::string> asked_;  // every name looked up
  std::vector<Placed> matrices_;
  std::vector<NamedMatrix> named_;
  std::vector<Staged> staged_;
  std::vector<std::vector<float>> staged_vectors_;
  std::vector<std::vector<uint8_t>> staged_bytes_;
};

}  // namespace ds
