#pragma once
// A small command-line parser over a table of options: `--name value`,
// `--name=value`, `-n value`, `--flag`, and positional words. The same table
// makes `--help` (print_help), so what the parser accepts and what the help
// lists cannot drift apart; an option's default lives in the table alone.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

// One option. names: its spellings, the long one (--name) among them, which is
// the name the code asks for and the help lists last. value: what it takes, as
// the help shows it (FILE, N); empty for a flag. fallback: its value when not
// given, as text; empty when it has none or one derived from other options (the
// help text says from what, and the code passes it). help: what it does.
struct Option {
  std::vector<std::string> names;
  std::string value;
  std::string fallback;
  std::string help;
};
using OptionTable = std::vector<Option>;

// The options of several tables, in order (a command's own and the shared groups it takes).
OptionTable join_options(std::initializer_list<OptionTable> tables);

class Args {
 public:
  // Refuses an option the table lacks, naming the closest one it has; --help
  // or -h anywhere makes wants_help() true and nothing else is checked.
  static Result<Args> parse(int argc, char** argv, const OptionTable& table);

  bool wants_help() const { return help_; }
  // Any of an option's names. One the table lacks was not given (shared
  // parsers read groups of options some commands do not take).
  bool has(const std::string& name) const;
  // The value given, else the table's default, else `derived` (the command's
  // default computed from other options: giving one where the table has a default is a programming error).
  std::string get(const std::string& name, const std::string& derived = "") const;
  Result<int64_t> get_int(const std::string& name, std::optional<int64_t> derived = std::nullopt) const;
  Result<double> get_float(const std::string& name, std::optional<double> derived = std::nullopt) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The name an option was given by (-d for --n-depth), for errors that quote the command line; else its long name.
  std::string spelled(const std::string& name) const;

  // For options given other than on the command line (a swap's fields over serve's flags).
  void set(const std::string& name, const std::string& value) { values_[canonical(name)] = value; }
  void set_flag(const std::string& name) { flags_.insert(canonical(name)); }
  void erase(const std::string& name) {
    values_.erase(canonical(name));
    flags_.erase(canonical(name));
  }

 private:
  const Option* find(const std::string& name) const;
  const std::string& canonical(const std::string& name) const;
  // The text of `name`'s value: given, or the table's default; nullopt when neither.
  std::optional<std::string> text(const std::string& name, bool derived_given) const;

  OptionTable table_;
  std::map<std::string, std::string> values_;  // by long name
  std::set<std::string> flags_;
  std::map<std::string, std::string> spellings_;  // long name -> as given
  std::vector<std::string> positional_;
  bool help_ = false;
};

// `usage` (the command's synopsis, a line), `about` (what it does) and every
// option of `table` with its value, default and meaning, on stdout; returns 0,
// the exit status of `dsinfer COMMAND --help`.
int print_help(const std::string& usage, const std::string& about, const OptionTable& table);

}  // namespace ds
