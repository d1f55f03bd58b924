#include "hub/hub_reference.h"

#include <algorithm>
#include <cctype>

namespace ds {
namespace {

constexpr const char* k_scheme = "hf://";

// The hub's rule for a repository's owner and name: letters, digits, - _ . (no "..", no leading or trailing - or .).
bool valid_part(const std::string& part) {
  if (part.empty() || part.size() > 96 || part.find("..") != std::string::npos) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
  for (const unsigned char c : part) {
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

Status check_repo(const std::string& repo, const std::string& text) {
  const size_t slash = repo.find('/');
  if (slash == std::string::npos || !valid_part(repo.substr(0, slash)) || !valid_part(repo.substr(slash + 1))) {
    return Status::error("'" + text + "': a repository is OWNER/NAME (letters, digits, - _ .)");
  }
  return Status();
}

Status check_file(const std::string& file, const std::string& text) {
  if (!is_repository_file(file)) return Status::error("'" + text + "': '" + file + "' is not a file inside a repository");
  return Status();
}

// "OWNER/NAME[@REVISION]" of an hf:// URL into ref, both checked.
Status set_repo_and_revision(const std::string& part, const std::string& text, HubReference& ref) {
  const size_t at = part.find('@');
  ref.repo = part.substr(0, at);
  if (at != std::string::npos) {
    ref.revision = part.substr(at + 1);
    DS_RETURN_IF_ERROR(check_file(ref.revision, text));
  }
  return check_repo(ref.repo, text);
}

}  // namespace

Result<HubReference> parse_hub_repository_url(const std::string& text) {
  if (!is_hub_url(text)) return Status::error("'" + text + "' is not an hf:// URL");
  std::string repo = text.substr(std::string(k_scheme).size());
  while (!repo.empty() && repo.back() == '/') repo.pop_back();
  HubReference ref;
  DS_RETURN_IF_ERROR(set_repo_and_revision(repo, text, ref));
  return ref;
}

bool is_repository_file(const std::string& name) {
  if (name.empty() || name.size() > 1024 || name.front() == '/' || name.back() == '/') return false;
  for (const unsigned char c : name) {
    if (c < 0x20 || c == '\\') return false;
  }
  for (size_t start = 0; start <= name.size();) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string segment = name.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    start = end + 1;
  }
  return true;
}

Result<HubReference> parse_hub_reference(const std::string& text) {
  HubReference ref;
  const size_t colon = text.find(':');
  ref.repo = text.substr(0, colon);
  DS_RETURN_IF_ERROR(check_repo(ref.repo, text));
  if (colon != std::string::npos) {
    ref.selector = text.substr(colon + 1);
    DS_RETURN_IF_ERROR(check_file(ref.selector, text));
  }
  return ref;
}

bool is_hub_url(const std::string& text) { return text.rfind(k_scheme, 0) == 0; }

Result<HubReference> parse_hub_url(const std::string& text) {
  if (!is_hub_url(text)) return Status::error("'" + text + "' is not an hf:// URL");
  const std::string rest = text.substr(std::string(k_scheme).size());
  const size_t first = rest.find('/'), second = first == std::string::npos ? first : rest.find('/', first + 1);
  if (second == std::string::npos) return Status::error("'" + text + "': an hf:// model is hf://OWNER/NAME[@REVISION]/FILE");
  HubReference ref;
  DS_RETURN_IF_ERROR(set_repo_and_revision(rest.substr(0, second), text, ref));
  ref.selector = rest.substr(second + 1);
  DS_RETURN_IF_ERROR(check_file(ref.selector, text));
  return ref;
}

}  // namespace ds
