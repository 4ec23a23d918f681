// Syntax tree of the Jinja subset, and the parser that builds it (lexing with HF's settings:
// trim_blocks, lstrip_blocks, no trailing newline).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/chat/jinja_value.h"

namespace llmrt::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral, kName, kList, kTuple, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest,
    kUnary, kBinary, kCompare, kAnd, kOr, kNot, kCond,
  };
  Kind kind;
  int line = 0;
  Value literal;                  // kLiteral
  std::string name;               // kName, kAttr attribute, kFilter/kTest name, kUnary/kBinary op
  std::vector<ExprPtr> args;      // operands / items / call args; args[0] is the object for
                                  // kAttr, kIndex, kSlice (then start, stop, step; null = omitted),
                                  // kCall (callee), kFilter, kTest
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall/kFilter/kTest keyword args
  bool negated = false;           // kTest: "is not"
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct FilterCall {
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kFilterBlock,
              kPlain /* generation: renders its body */ };
  Kind kind;
  int line = 0;
  std::string text;                       // kText
  ExprPtr expr;                           // kOutput, kFor iterable, kSet value
  std::vector<ExprPtr> conds;             // kIf: one per branch with a condition
  std::vector<Body> bodies;               // kIf: branch bodies (+ else); kFor: body, else
  std::vector<std::string> targets;       // kFor / kSet names (tuple unpacking); kMacro: name
  std::string attr;                       // kSet ns.attr: attribute (targets[0] = ns)
  ExprPtr loop_filter;                    // kFor "if" clause
  std::vector<std::string> params;        // kMacro
  std::vector<ExprPtr> defaults;          // kMacro: default per param (null = none)
  std::vector<FilterCall> filters;        // kFilterBlock, kSetBlock
  Body body;                              // kMacro, kSetBlock, kFilterBlock, kPlain
};

/// Parses template source into statements. Errors name the construct and the line.
StatusOr<Body> parse_template(std::string_view source);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace llmrt::jinja
