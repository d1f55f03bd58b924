#pragma once
// A Hugging Face checkpoint directory as DeepSeek and others publish it:
// config.json, the weights in one model.safetensors or in shards listed by
// model.safetensors.index.json, and the tokenizer files. Every indexed
// tensor's shard must be there and hold it. A tensor is read as float32
// whatever its stored type, and an FP8 (e4m3) weight with its block scales
// (one per 128x128 block, as the quantization_config says: V3's
// NAME_scale_inv in float32, V4's STEM.scale as e8m0 powers of two) is
// dequantized exactly: each element times its block's scale, in float32, as
// llama.cpp's converter computes it. DeepSeek-V4's FP4 experts (e2m1 codes
// two to an int8, an e8m0 scale per 32 in STEM.scale) are read as ggml's
// MXFP4 blocks, bit for bit, and integer tensors as int32.

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/safetensors_file.h"

namespace ds {

class HfCheckpoint {
 public:
  static Result<std::unique_ptr<HfCheckpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // Every tensor's name, sorted.
  std::vector<std::string> tensor_names() const;
  const SafetensorsTensor* find(const std::string& name) const;
  // How a tensor is stored: what a conversion that keeps the source's type (V4's) goes by.
  enum class Stored { f32, f16, bf16, fp8, fp4, integer };
  // Reads a tensor's rows, one at a time: a conversion holds a row, not the tensor.
  class RowReader {
   public:
    int64_t rows() const { return rows_; }
    int64_t columns() const { return columns_; }  // elements: an FP4 row stores two to a byte
    Stored stored() const { return stored_; }
    // "SHARD: 'NAME'", for messages.
    std::string where() const { return file_->path() + ": '" + tensor_->name + "'"; }
    // A float or FP8 tensor's row as float32 (FP8 dequantized with its block scales).
    void row(int64_t r, float* out) const;
    // An FP4 tensor's row as ggml's MXFP4 blocks: per 32 elements the scale byte, then
    // 16 bytes holding element j in the low nibble and j + 16 in the high one.
    void mxfp4_row(int64_t r, uint8_t* out) const;
    // An integer tensor's row as int32 (an int64 beyond int32's range becomes INT32_MIN or INT32_MAX, which no id is).
    void int32_row(int64_t r, int32_t* out) const;
    // Drops the pages of rows [0, end) from this process (the page cache keeps them).
    void release_rows(int64_t end) const;

   private:
    friend class HfCheckpoint;
    const SafetensorsFile* file_ = nullptr;
    const SafetensorsTensor* tensor_ = nullptr;
    const SafetensorsFile* scale_file_ = nullptr;
    const SafetensorsTensor* scale_ = nullptr;
    Stored stored_ = Stored::f32;
    int64_t rows_ = 0, columns_ = 0, block_rows_ = 0, block_columns_ = 0;
  };
  // A 1-D tensor is one row.
  Result<RowReader> rows(const std::string& name) const;
  // Whether a tensor is an FP8 or FP4 weight's scale (read with its weight, not on its own).
  bool is_scale(const std::string& name) const;

 private:
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  Result<Located> locate(const std::string& name) const;
  // The name of a weight's scales: V4's STEM.scale where there is one, else V3's NAME_scale_inv.
  std::string scale_name(const std::string& weight) const;
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Located> tensors_;
  std::vector<int64_t> fp8_block_ = {128, 128};
};

// An FP8 e4m3 (OCP "fn": no infinities, 0x7f and 0xff NaN) byte as float: exact.
float fp8_e4m3_to_f32(uint8_t x);

}  // namespace ds
