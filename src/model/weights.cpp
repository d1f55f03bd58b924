#include "model/weights.h"

#include <sys/mman.h>

#include <cstring>

#include "base/log.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

std::string shape_string(const GgufTensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

class Loader {
 public:
  Loader(const GgufFile& file, LoadMode mode) : file_(file), mode_(mode) {}

  // A matrix with n_cols elements per row and n_rows rows (GGUF ne = {n_cols, n_rows}).
  Status matrix(const std::string& name, int64_t n_rows, int64_t n_cols, WeightMatrix* out) {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (!t) return Status::error("model: tensor '" + name + "' is missing");
    if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows) {
      return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" +
                           std::to_string(n_cols) + ", " + std::to_string(n_rows) + "]");
    }
    if (!is_compute_supported(t->type)) {
      return Status::error("model: tensor '" + name + "' has type " + dtype_name(t->type) +
                           ", which dsinfer does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                           "Q4_K, Q5_K, Q6_K)");
    }
    *out = WeightMatrix{t->type, n_rows, n_cols, file_.tensor_data(*t)};
    matrices_.push_back({out, t});
    return Status();
  }

  Status vector(const std::string& name, int64_t n, std::vector<float>* out, bool optional = false) {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (!t) return optional ? Status() : Status::error("model: tensor '" + name + "' is missing");
    if (t->n_elements() != n || t->ne[0] != n) {
      return Status::error("model: tensor '" + name + "' has shape " + shape_string(*t) + ", expected [" + std::to_string(n) + "]");
    }
    if (t->type != DType::f32 && t->type != DType::f16 && t->type != DType::bf16) {
      return Status::error("model: tensor '" + name + "' has type " + dtype_name(t->type) + "; vectors must be F32, F16 or BF16");
    }
    out->resize(size_t(n));
    dequantize_row(t->type, file_.tensor_data(*t), out->data(), n);
    return Status();
  }

  // Moves every matrix into one huge-page-backed anonymous region.
  Status place(void** region, size_t* region_bytes, size_t* total_bytes) {
    size_t total = 0;
    for (const auto& m : matrices_) total += (m.info->n_bytes + 63) / 64 * 64;
    *total_bytes = total;
    if (mode_ == LoadMode::mmap || total == 0) return Status();
    void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return Status::error("model: cannot allocate " + std::to_string(total) + " bytes for weights");
    madvise(mem, total, MADV_HUGEPAGE);
    std::unordered_map<const GgufTensorInfo*, uint8_t*> placed;
    size_t offset = 0;
    for (auto& m : matrices_) {
      auto it = placed.find(m.info);
      if (it == placed.end()) {
        uint8_t* dst = static_cast<uint8_t*>(mem) + offset;
        std::memcpy(dst, file_.tensor_data(*m.info), m.info->n_bytes);
        offset += (m.info->n_bytes + 63) / 64 * 64;
        it = placed.emplace(m.info, dst).first;
      }
      m.matrix->data = it->second;
    }
    *region = mem;
    *region_bytes = total;
    return Status();
  }

 private:
  struct Placed {
    WeightMatrix* matrix;
    const GgufTensorInfo* info;
  };
  const GgufFile& file_;
  LoadMode mode_;
  std::vector<Placed> matrices_;
};

}  // namespace

Result<std::unique_ptr<ModelWeights>> ModelWeights::load(std::unique_ptr<GgufFile> file, const ModelConfig& c,
                                                         LoadMode mode) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->file_ = std::move(file);
  Loader loader(*w->file_, mode);
  if (c.n_vocab <= 0) return Status::error("model: tensor 'token_embd.weight' is missing");
  DS_RETURN_IF_ERROR(loader.matrix("token_embd.weight", c.n_vocab, c.n_embd, &w->token_embd));
  DS_RETURN_IF_ERROR(loader.vector("output_norm.weight", c.n_embd, &w->output_norm));
  if (w->file_->find_tensor("output.weight")) {
    DS_RETURN_IF_ERROR(loader.matrix("output.weight", c.n_vocab, c.n_embd, &w->output));
  } else {
    w->tied_output = true;
  }
  w->layers.resize(size_t(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w->layers[size_t(i)];
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_norm.weight", c.n_embd, &l.attn_norm));
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_q.weight", c.q_dim(), c.n_embd, &l.wq));
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_k.weight", c.kv_dim(), c.n_embd, &l.wk));
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_v.weight", c.kv_dim(), c.n_embd, &l.wv));
    DS_RETURN_IF_ERROR(loader.matrix(b + "attn_output.weight", c.n_embd, c.q_dim(), &l.wo));
    const bool bias_optional = !c.arch->requires_qkv_bias;
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_q.bias", c.q_dim(), &l.bq, bias_optional));
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_k.bias", c.kv_dim(), &l.bk, bias_optional));
    DS_RETURN_IF_ERROR(loader.vector(b + "attn_v.bias", c.kv_dim(), &l.bv, bias_optional));
    DS_RETURN_IF_ERROR(loader.vector(b + "ffn_norm.weight", c.n_embd, &l.ffn_norm));
    DS_RETURN_IF_ERROR(loader.matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd, &l.w_gate));
    DS_RETURN_IF_ERROR(loader.matrix(b + "ffn_up.weight", c.n_ff, c.n_embd, &l.w_up));
    DS_RETURN_IF_ERROR(loader.matrix(b + "ffn_down.weight", c.n_embd, c.n_ff, &l.w_down));
  }
  DS_RETURN_IF_ERROR(loader.place(&w->copy_, &w->copy_bytes_, &w->weight_bytes));
  if (w->tied_output) w->output = w->token_embd;
  return w;
}

ModelWeights::~ModelWeights() {
  if (copy_) munmap(copy_, copy_bytes_);
}

}  // namespace ds
