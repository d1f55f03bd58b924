#include "engine/model_version.h"

#include <algorithm>

namespace ds {

ModelVersion::~ModelVersion() { engine.reset(); }

Result<grammar::TokenMatcher> ModelVersion::matcher_for(const std::string& gbnf) {
  std::lock_guard lock(grammar_mutex_);
  for (size_t i = 0; i < recent_grammars_.size(); ++i) {
    if (recent_grammars_[i].first != gbnf) continue;
    std::rotate(recent_grammars_.begin() + long(i), recent_grammars_.begin() + long(i) + 1, recent_grammars_.end());
    return recent_grammars_.back().second;
  }
  auto compiled = grammar::Grammar::from_gbnf(gbnf);
  if (!compiled.ok()) return compiled.status();
  if (!vocab_trie_) vocab_trie_ = std::make_shared<const grammar::VocabTrie>(grammar::VocabTrie::of(*tokenizer));
  grammar::TokenMatcher matcher(std::make_shared<const grammar::Grammar>(compiled.take()), vocab_trie_,
                                tokenizer->vocab().end_of_generation);
  if (recent_grammars_.size() >= 16) recent_grammars_.erase(recent_grammars_.begin());
  recent_grammars_.emplace_back(gbnf, matcher);
  return matcher;
}

ModelVersions::ModelVersions(std::shared_ptr<ModelVersion> first) : current_(std::move(first)) {}

std::shared_ptr<ModelVersion> ModelVersions::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::vector<std::shared_ptr<ModelVersion>> ModelVersions::live() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<ModelVersion>> all;
  if (current_) all.push_back(current_);
  all.insert(all.end(), retiring_.begin(), retiring_.end());
  return all;
}

std::string ModelVersions::switch_to(std::shared_ptr<ModelVersion> next) {
  std::lock_guard lock(mutex_);
  std::string retired;
  if (current_) {
    retired = current_->label;
    retiring_.push_back(std::move(current_));
  }
  retiring_.erase(std::remove(retiring_.begin(), retiring_.end(), next), retiring_.end());
  current_ = std::move(next);
  return retired;
}

std::vector<std::string> ModelVersions::release_unheld() {
  std::vector<std::shared_ptr<ModelVersion>> released;
  {
    std::lock_guard lock(mutex_);
    // use_count 1: only this list holds it, and only this list can hand it out (under the lock).
    auto unheld = std::stable_partition(retiring_.begin(), retiring_.end(), [](const auto& v) { return v.use_count() > 1; });
    released.assign(std::make_move_iterator(unheld), std::make_move_iterator(retiring_.end()));
    retiring_.erase(unheld, retiring_.end());
  }
  std::vector<std::string> labels;
  for (auto& v : released) labels.push_back(v->label);
  released.clear();
  return labels;
}

}  // namespace ds
