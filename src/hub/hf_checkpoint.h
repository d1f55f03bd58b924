#pragma once
// A Hugging Face checkpoint directory as DeepSeek and others publish it:
// config.json, the weights in one model.safetensors or in shards listed by
// model.safetensors.index.json, and the tokenizer files. Every indexed
// tensor's shard must be there and hold it. A tensor is read as float32
// whatever its stored type, and an FP8 (e4m3) weight with its block scales
// (NAME_scale_inv, one per 128x128 block, as DeepSeek's quantization_config
// says) is dequantized exactly: each element times its block's scale, in
// float32, as llama.cpp's converter computes it.

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
  // Reads a tensor's rows as float32 (FP8 weights dequantized with their
  // block scales), one at a time: a conversion holds a row, not the tensor.
  class RowReader {
   public:
    int64_t rows() const { return rows_; }
    int64_t columns() const { return columns_; }
    // "SHARD: 'NAME'", for messages.
    std::string where() const { return file_->path() + ": '" + tensor_->name + "'"; }
    void row(int64_t r, float* out) const;
    // Drops the pages of rows [0, end) from this process (the page cache keeps them).
    void release_rows(int64_t end) const;

   private:
    friend class HfCheckpoint;
    const SafetensorsFile* file_ = nullptr;
    const SafetensorsTensor* tensor_ = nullptr;
    const SafetensorsFile* scale_file_ = nullptr;
    const SafetensorsTensor* scale_ = nullptr;
    int64_t rows_ = 0, columns_ = 0, block_rows_ = 0, block_columns_ = 0;
  };
  // A 1-D tensor is one row.
  Result<RowReader> rows(const std::string& name) const;
  // Whether a tensor is an FP8 weight's scale (read with its weight, not on its own).
  bool is_scale(const std::string& name) const;

 private:
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  Result<Located> locate(const std::string& name) const;
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Located> tensors_;
  std::vector<int64_t> fp8_block_ = {128, 128};
};

// An FP8 e4m3 (OCP "fn": no infinities, 0x7f and 0xff NaN) byte as float: exact.
float fp8_e4m3_to_f32(uint8_t x);

}  // namespace ds
