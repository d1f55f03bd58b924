#include "server/multipart_form.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace ds {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// The value of `parameter` in a header value "type; a=1; b=\"two\"", or nullopt.
std::optional<std::string> header_parameter(const std::string& value, const std::string& parameter) {
  size_t at = value.find(';');
  while (at != std::string::npos) {
    size_t start = value.find_first_not_of(" \t", at + 1);
    if (start == std::string::npos) return std::nullopt;
    const size_t equals = value.find('=', start);
    if (equals == std::string::npos) return std::nullopt;
    const std::string name = lower(trim(value.substr(start, equals - start)));
    std::string text;
    size_t next;
    if (equals + 1 < value.size() && value[equals + 1] == '"') {
      next = equals + 2;
      while (next < value.size() && value[next] != '"') {
        if (value[next] == '\\' && next + 1 < value.size()) ++next;
        text += value[next++];
      }
      next = value.find(';', next);
    } else {
      next = value.find(';', equals);
      text = trim(value.substr(equals + 1, next == std::string::npos ? std::string::npos : next - equals - 1));
    }
    if (name == parameter) return text;
    at = next;
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<FormPart>> parse_multipart_form(const std::string& content_type, const std::string& body) {
  if (lower(trim(content_type.substr(0, content_type.find(';')))) != "multipart/form-data") {
    return Status::error("the body must be multipart/form-data (Content-Type was '" + content_type.substr(0, 64) + "')");
  }
  const auto boundary = header_parameter(content_type, "boundary");
  if (!boundary || boundary->empty() || boundary->size() > 70) return Status::error("multipart/form-data without a valid boundary");
  const std::string delimiter = "--" + *boundary;
  // The first delimiter opens the body or follows a preamble's line end.
  size_t at = body.compare(0, delimiter.size(), delimiter) == 0 ? 0 : body.find("\r\n" + delimiter);
  if (at == std::string::npos) return Status::error("the multipart body has no part");
  if (at > 0) at += 2;
  std::vector<FormPart> parts;
  while (true) {
    at += delimiter.size();
    if (body.compare(at, 2, "--") == 0) return parts;  // the closing delimiter
    if (body.compare(at, 2, "\r\n") != 0) return Status::error("malformed multipart delimiter line");
    at += 2;
    const size_t headers_end = body.find("\r\n\r\n", at);
    if (headers_end == std::string::npos) return Status::error("a multipart part's headers do not end");
    FormPart part;
    bool disposed = false;
    for (size_t line = at; line < headers_end + 2;) {
      const size_t end = body.find("\r\n", line);
      const std::string header = body.substr(line, end - line);
      line = end + 2;
      const size_t colon = header.find(':');
      if (colon == std::string::npos) return Status::error("malformed multipart part header");
      const std::string name = lower(trim(header.substr(0, colon)));
      const std::string value = trim(header.substr(colon + 1));
      if (name == "content-disposition") {
        if (lower(trim(value.substr(0, value.find(';')))) != "form-data") return Status::error("a part's Content-Disposition is not form-data");
        const auto field = header_parameter(value, "name");
        if (!field) return Status::error("a multipart part has no name");
        part.name = *field;
        if (const auto filename = header_parameter(value, "filename")) {
          part.filename = *filename;
          part.is_file = true;
        }
        disposed = true;
      } else if (name == "content-type") {
        part.content_type = value;
      }
    }
    if (!disposed) return Status::error("a multipart part has no Content-Disposition");
    const size_t content = headers_end + 4;
    const size_t next = body.find("\r\n" + delimiter, content);
    if (next == std::string::npos) return Status::error("the multipart body ends inside a part (no closing boundary)");
    part.body = body.substr(content, next - content);
    parts.push_back(std::move(part));
    at = next + 2;
  }
}

}  // namespace ds
