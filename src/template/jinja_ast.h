#pragma once
// The parsed form of a Jinja template: expressions and statements as trees,
// evaluated by jinja_interpreter.cpp.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace ds::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    list,         // args
    tuple,        // args
    dict,         // args: key, value, key, value...
    attribute,    // args[0] . name
    subscript,    // args[0] [ args[1] ]
    slice,        // args[0] [ args[1] : args[2] : args[3] ], absent parts null
    call,         // args[0] ( args[1..], keyword )
    filter,       // args[0] | name ( args[1..], keyword )
    test,         // args[0] is [not] name ( args[1..] ); negated
    unary,        // name: "-", "+" or "not"; args[0]
    binary,       // name: an arithmetic operator or "~"; args[0], args[1]
    logical,      // name: "and" / "or"
    compare,      // args[0] then pairs: name holds the operators, space-separated; args[1..]
    conditional,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    text,         // text
    print,        // expr
    if_,          // branches (conditions, bodies); else_body
    for_,         // targets in expr [if condition]: body / else_body
    set,          // targets (name or ns.attr) = expr
    set_block,    // targets[0] = rendered body, through filters
    macro,        // name(params with defaults): body
    call_block,   // {% call macro(...) %}: body is caller()
    filter_block, // body through filters
    with_block,   // {% with name = expr, ... %}: body in a scope of its own, params the names and their values
    break_,
    continue_,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;  // set ns.attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro: name, default or null
  std::vector<ExprPtr> filters;  // set_block / filter_block: filter expressions applied in order (args[0] unused)
};

}  // namespace ds::jinja
