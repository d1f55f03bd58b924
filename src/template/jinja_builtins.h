#pragma once
// jinja2's filters, tests and globals, and the Python methods templates call
// on str, dict and list, as the immutable sandbox allows them: a method that
// would change a list or dict is an error when called, as in
// ImmutableSandboxedEnvironment.

#include <ctime>
#include <functional>
#include <string>

#include "template/jinja_value.h"

namespace ds::jinja {

// markupsafe's escape: & < > ' " as entities; Markup passes through.
Value escape_html(const Value& v);

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);

// obj.name: a dict's key or a method bound to the object, else an Undefined
// that says what was missing. Throws for an attribute of an undefined value.
Value get_attribute(const Value& object, const std::string& name);
// obj[key], with Python's negative indexes; missing gives an Undefined.
Value get_item(const Value& object, const Value& key);

// range, dict, namespace, raise_exception and strftime_now (reading `now`,
// so that tests can fix the date). Each namespace() made is passed to
// `on_namespace`, so its maker can break the cycles one may come to hold.
std::shared_ptr<Dict> make_globals(std::function<std::time_t()> now,
                                   std::function<void(const std::shared_ptr<Dict>&)> on_namespace);

}  // namespace ds::jinja
