#include "model/family.h"

namespace ds {
namespace {

const Family* const* families() {
  static const Family* const table[] = {&llama_family(), &qwen2_family(), &deepseek2_family(), &deepseek32_family(), nullptr};
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

Status refuse_mla_prefill(const ModelOptions& options) {
  if (options.mla_prefill == MlaPrefill::automatic) return Status();
  return Status::error("model: an MLA form (--mla-prefill) was asked for, but this model has no multi-head latent attention");
}

}  // namespace ds
