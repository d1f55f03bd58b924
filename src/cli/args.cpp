#include "cli/args.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace ds {
namespace {

bool looks_like_option(const std::string& word) {
  // "-5" is a negative number, a value or a positional word, not an option.
  return word.size() > 1 && word[0] == '-' && !std::isdigit(static_cast<unsigned char>(word[1]));
}

const std::string& long_name(const Option& option) {
  for (const std::string& name : option.names) {
    if (name.rfind("--", 0) == 0) return name;
  }
  DS_CHECK(false, "option " + (option.names.empty() ? std::string("?") : option.names[0]) + " has no --long name");
  return option.names[0];
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known name a mistyped `word` most likely meant: within a few edits, or
// one that starts the other (--temperature for --temp); empty when none is near.
std::string closest_name(const std::string& word, const OptionTable& table) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 4) + 1;
  OptionTable known = table;
  known.push_back({{"--help"}, "", "", ""});
  for (const Option& option : known) {
    for (const std::string& name : option.names) {
      if (name.size() < 3) continue;  // "-m" is a letter away from everything
      size_t distance = edit_distance(word, name);
      if (word.rfind(name, 0) == 0 || name.rfind(word, 0) == 0) distance = std::min<size_t>(distance, 1);
      if (distance < best_distance) {
        best_distance = distance;
        best = name;
      }
    }
  }
  return best;
}

}  // namespace

OptionTable join_options(std::initializer_list<OptionTable> tables) {
  OptionTable joined;
  for (const OptionTable& table : tables) joined.insert(joined.end(), table.begin(), table.end());
  return joined;
}

Result<Args> Args::parse(int argc, char** argv, const OptionTable& table) {
  Args args;
  args.table_ = table;
  for (const Option& option : args.table_) {
    for (const std::string& name : option.names) DS_CHECK(args.find(name) == &option, "option " + name + " is in the table twice");
    (void)long_name(option);
  }
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      args.help_ = true;
      return args;
    }
  }
  for (int i = 0; i < argc; ++i) {
    std::string word = argv[i];
    if (!looks_like_option(word)) {
      args.positional_.push_back(word);
      continue;
    }
    std::optional<std::string> attached;  // --name=value
    const size_t equals = word.find('=');
    if (word.rfind("--", 0) == 0 && equals != std::string::npos) {
      attached = word.substr(equals + 1);
      word.resize(equals);
    }
    const Option* option = args.find(word);
    if (!option) {
      const std::string near = closest_name(word, table);
      return Status::error("unknown option " + word + (near.empty() ? "" : " (did you mean " + near + "?)") + ": --help lists them");
    }
    args.spellings_[long_name(*option)] = word;
    if (option->value.empty()) {
      if (attached) return Status::error("option " + word + " is a flag and takes no value");
      args.flags_.insert(long_name(*option));
    } else if (attached) {
      args.values_[long_name(*option)] = *attached;
    } else {
      if (i + 1 >= argc) return Status::error("option " + word + " needs a value (" + option->value + ")");
      args.values_[long_name(*option)] = argv[++i];
    }
  }
  return args;
}

const Option* Args::find(const std::string& name) const {
  for (const Option& option : table_) {
    if (std::find(option.names.begin(), option.names.end(), name) != option.names.end()) return &option;
  }
  return nullptr;
}

const std::string& Args::canonical(const std::string& name) const {
  const Option* option = find(name);
  return option ? long_name(*option) : name;
}

std::string Args::spelled(const std::string& name) const {
  auto it = spellings_.find(canonical(name));
  return it == spellings_.end() ? canonical(name) : it->second;
}

bool Args::has(const std::string& name) const {
  const std::string& key = canonical(name);
  return values_.count(key) > 0 || flags_.count(key) > 0;
}

std::optional<std::string> Args::text(const std::string& name, bool derived_given) const {
  const Option* option = find(name);
  if (!option) return std::nullopt;  // an option of a shared group this command does not take
  const std::string& key = long_name(*option);
  DS_CHECK(!(derived_given && !option->fallback.empty()), "option " + key + " has its default in the table and another in the code");
  auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  if (!option->fallback.empty()) return option->fallback;
  return std::nullopt;
}

std::string Args::get(const std::string& name, const std::string& derived) const {
  return text(name, !derived.empty()).value_or(derived);
}

Result<int64_t> Args::get_int(const std::string& name, std::optional<int64_t> derived) const {
  const std::optional<std::string> value = text(name, derived.has_value());
  if (!value) {
    if (derived) return *derived;
    return Status::error("option " + canonical(name) + " is required");
  }
  char* end = nullptr;
  const long long v = std::strtoll(value->c_str(), &end, 10);
  if (end == value->c_str() || *end != '\0') return Status::error("option " + spelled(name) + " expects an integer, got '" + *value + "'");
  return int64_t(v);
}

Result<double> Args::get_float(const std::string& name, std::optional<double> derived) const {
  const std::optional<std::string> value = text(name, derived.has_value());
  if (!value) {
    if (derived) return *derived;
    return Status::error("option " + canonical(name) + " is required");
  }
  char* end = nullptr;
  const double v = std::strtod(value->c_str(), &end);
  if (end == value->c_str() || *end != '\0') return Status::error("option " + spelled(name) + " expects a number, got '" + *value + "'");
  return v;
}

int print_help(const std::string& usage, const std::string& about, const OptionTable& table) {
  std::printf("usage: %s\n\n%s\n\noptions:\n", usage.c_str(), about.c_str());
  constexpr size_t k_column = 34;
  for (const Option& option : table) {
    std::string left = "  ";
    for (size_t i = 0; i < option.names.size(); ++i) left += (i ? ", " : "") + option.names[i];
    if (!option.value.empty()) left += " " + option.value;
    std::string right = option.help;
    if (!option.fallback.empty()) right += " (default: " + option.fallback + ")";
    if (left.size() + 2 > k_column) {
      std::printf("%s\n%*s%s\n", left.c_str(), int(k_column), "", right.c_str());
    } else {
      std::printf("%-*s%s\n", int(k_column), left.c_str(), right.c_str());
    }
  }
  std::printf("  %-*s%s\n", int(k_column - 2), "-h, --help", "this list, then exit");
  return 0;
}

}  // namespace ds
