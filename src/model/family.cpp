#include "model/family.h"

#include <algorithm>

namespace ds {
namespace {

const Family* const* families() {
  static const Family* const table[] = {&llama_family(), &qwen2_family(), &deepseek2_family(), &deepseek32_family(), &deepseek4_family(), nullptr};
  return table;
}

}  // namespace

const std::vector<int64_t>& LayerStack::expert_tokens() const {
  static const std::vector<int64_t> none;
  return none;
}

const Family* find_family(const std::string& name) {
  for (const Family* const* f = families(); *f; ++f) {
    if (name == (*f)->name) return *f;
  }
  return nullptr;
}

std::string supported_family_names() {
  std::string names;
  for (const Family* const* f = families(); *f; ++f) names += std::string(names.empty() ? "" : ", ") + (*f)->name;
  return names;
}

std::vector<BackendOp> forward_ops(const ModelConfig& c) {
  std::vector<BackendOp> ops = {BackendOp::embed, BackendOp::gather_rows, BackendOp::rms_norm, BackendOp::matmul};
  for (BackendOp op : c.family->layer_ops(c)) {
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  }
  return ops;
}

Status check_forward_ops(const ModelConfig& c, const Backend& backend) {
  std::string missing;
  for (BackendOp op : forward_ops(c)) {
    if (!backend.implements(op)) missing += std::string(missing.empty() ? "" : ", ") + backend_op_name(op);
  }
  if (missing.empty()) return Status();
  return Status::error("model: the " + backend.name() + " backend does not implement ops " + c.family->name +
                       "'s forward calls: " + missing);
}

Status refuse_mla_prefill(const ModelOptions& options) {
  if (options.mla_prefill == MlaPrefill::automatic) return Status();
  return Status::error("model: an MLA form (--mla-prefill) was asked for, but this model has no multi-head latent attention");
}

}  // namespace ds
