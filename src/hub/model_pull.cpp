#include "hub/model_pull.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>

#include "base/log.h"
#include "hub/hub_cache.h"

namespace ds {
namespace {

constexpr const char* k_default_quantization = "Q4_K_M";

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return text;
}

bool is_gguf(const std::string& name) { return name.size() > 5 && upper(name.substr(name.size() - 5)) == ".GGUF"; }

// NAME-00001-of-00003.gguf: its prefix and count, or count 0 for a whole file.
struct SplitName {
  std::string prefix;
  int part = 0, count = 0;
};
SplitName split_name(const std::string& name) {
  static const std::regex pattern(R"((.*)-(\d{5})-of-(\d{5})\.gguf)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return {name, 0, 0};
  return {m[1].str(), std::atoi(m[2].str().c_str()), std::atoi(m[3].str().c_str())};
}

// A quantization tag in a name, bounded by separators: Q4_K_M in "model-Q4_K_M.gguf", not "Q4_K_M" in "IQ4_K_M".
bool names_quantization(const std::string& name, const std::string& tag) {
  const std::string n = upper(name), t = upper(tag);
  for (size_t at = n.find(t); at != std::string::npos; at = n.find(t, at + 1)) {
    const bool left = at == 0 || !std::isalnum((unsigned char)n[at - 1]);
    const size_t end = at + t.size();
    const bool right = end == n.size() || !std::isalnum((unsigned char)n[end]);
    if (left && right) return true;
  }
  return false;
}

std::string listing(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

int64_t size_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
}

}  // namespace

PullOptions PullOptions::from_environment() {
  PullOptions options;
  options.cache_root = HubCache::default_root();
  const char* offline = std::getenv("HF_HUB_OFFLINE");
  options.offline = offline && (std::string(offline) == "1" || upper(offline) == "TRUE" || upper(offline) == "YES");
  return options;
}

Result<std::vector<std::string>> select_files(const std::vector<std::string>& names, const std::string& selector) {
  if (selector == k_checkpoint_selector) {
    // What `dsinfer convert` reads, at the repository's top level: no other formats' copies of the weights.
    static const std::set<std::string> k_named = {"config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                                                  "chat_template.jinja", "generation_config.json"};
    std::vector<std::string> files;
    for (const std::string& n : names) {
      const bool top = n.find('/') == std::string::npos;
      if (top && (k_named.count(n) || (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))) files.push_back(n);
    }
    std::sort(files.begin(), files.end());
    if (std::find(files.begin(), files.end(), "config.json") == files.end()) {
      return Status::error("no config.json at the repository's top level: not a Hugging Face checkpoint");
    }
    return files;
  }
  std::vector<std::string> ggufs;
  for (const std::string& n : names) {
    if (is_gguf(n)) ggufs.push_back(n);
  }
  std::string chosen;
  if (std::find(names.begin(), names.end(), selector) != names.end()) {
    chosen = selector;
  } else {
    const std::string tag = selector.empty() ? k_default_quantization : selector;
    std::set<std::string> models;  // whole files, or a split file's first part
    for (const std::string& n : ggufs) {
      const SplitName s = split_name(n);
      if (names_quantization(n, tag) && s.part <= 1) models.insert(n);
    }
    if (models.empty() && selector.empty()) {
      for (const std::string& n : ggufs) {
        if (split_name(n).part <= 1) models.insert(n);
      }
    }
    if (models.size() != 1) {
      return Status::error(std::string(models.empty() ? "no GGUF file" : "more than one GGUF file") + " matches '" + tag +
                           "': name one (REPO:FILE); the GGUF files are " + listing(ggufs));
    }
    chosen = *models.begin();
  }
  const SplitName split = split_name(chosen);
  if (split.count == 0) return std::vector<std::string>{chosen};
  if (split.part != 1) return Status::error(chosen + " is part " + std::to_string(split.part) + " of a split GGUF: name its first part");
  std::vector<std::string> parts;
  for (int k = 1; k <= split.count; ++k) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k, split.count);
    const std::string part = split.prefix + suffix;
    if (std::find(names.begin(), names.end(), part) == names.end()) {
      return Status::error("the split GGUF " + chosen + " lacks its part " + part + " in the repository");
    }
    parts.push_back(part);
  }
  return parts;
}

Result<PulledModel> pull_model(const HubReference& reference, HubClient& client, const PullOptions& options, const PullObserver& observer) {
  const HubCache cache(options.cache_root.empty() ? HubCache::default_root() : options.cache_root, reference.repo);
  const auto from_cache = [&](const std::string& why) -> Result<PulledModel> {
    const std::optional<std::string> commit = cache.commit_of(reference.revision);
    if (!commit) return Status::error(why + "; and the cache has no " + reference.repo + " at " + reference.revision);
    auto files = select_files(cache.snapshot_files(*commit), reference.selector);
    if (!files.ok()) return Status::error(why + "; in the cache: " + files.message());
    PulledModel pulled;
    pulled.commit = *commit;
    pulled.snapshot = cache.snapshot_path(*commit, "");
    pulled.snapshot.pop_back();
    for (const std::string& f : files.value()) {
      pulled.paths.push_back(cache.snapshot_path(*commit, f));
      if (size_of(pulled.paths.back()) < 0) return Status::error(why + "; and the cache's " + pulled.paths.back() + " is broken");
      if (observer.finished) observer.finished(f, false);
    }
    return pulled;
  };
  if (options.offline) return from_cache("HF_HUB_OFFLINE is set");

  auto revision = client.revision(reference.repo, reference.revision);
  if (!revision.ok()) {
    // Unreachable: what the cache has still serves (as huggingface_hub falls back); any other answer stands.
    if (revision.message().rfind("cannot reach", 0) != 0) return revision.status();
    auto cached = from_cache(revision.message());
    if (cached.ok()) DS_LOG_WARN("pull: %s; using the cache's %s", revision.message().c_str(), cached.value().commit.c_str());
    return cached;
  }
  std::vector<std::string> names;
  for (const HubFile& f : revision.value().files) names.push_back(f.name);
  auto selected = select_files(names, reference.selector);
  if (!selected.ok()) return Status::error(reference.repo + " at " + reference.revision + ": " + selected.message());

  PulledModel pulled;
  pulled.commit = revision.value().commit;
  pulled.snapshot = cache.snapshot_path(pulled.commit, "");
  pulled.snapshot.pop_back();
  DS_RETURN_IF_ERROR(cache.prepare());
  DS_RETURN_IF_ERROR(cache.write_ref(reference.revision, pulled.commit));
  for (const std::string& name : selected.value()) {
    const HubFile& file = *std::find_if(revision.value().files.begin(), revision.value().files.end(), [&](const HubFile& f) { return f.name == name; });
    const std::string pointer = cache.snapshot_path(pulled.commit, name), blob = cache.blob_path(file.hash);
    pulled.paths.push_back(pointer);
    if (size_of(pointer) == file.size) {
      if (observer.finished) observer.finished(name, false);
      continue;
    }
    auto lock = FileLock::acquire(cache.lock_path(file.hash));  // another pull of this blob finishes first
    if (!lock.ok()) return lock.status();
    bool downloaded = false;
    if (size_of(blob) != file.size) {
      if (observer.started) observer.started(name, file.size);
      DS_RETURN_IF_ERROR(client.download(reference.repo, pulled.commit, file, cache.partial_path(file.hash), observer.progress));
      if (std::rename(cache.partial_path(file.hash).c_str(), blob.c_str()) != 0) return Status::error("hub cache: cannot rename into " + blob);
      pulled.downloaded_bytes += file.size;
      downloaded = true;
    }
    DS_RETURN_IF_ERROR(cache.link(pulled.commit, name, file.hash));
    if (observer.finished) observer.finished(name, downloaded);
  }
  return pulled;
}

}  // namespace ds
