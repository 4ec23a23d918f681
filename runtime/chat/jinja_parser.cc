#include <cctype>
#include <cstdlib>
#include <set>

#include "runtime/chat/jinja_ast.h"

namespace llmrt::jinja {

bool is_unimplemented_builtin_filter(const std::string& name);

namespace {

struct Token {
  enum Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Kind kind;
  std::string value;
  int line;
};

struct SyntaxError {
  std::string message;
  int line;
};

constexpr int kMaxDepth = 200;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // Like jinja2: normalize newlines and drop one trailing newline (keep_trailing_newline=False).
    src_.reserve(src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      if (src[k] == '\r') {
        src_ += '\n';
        if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
      } else {
        src_ += src[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t open = find_open(pos);
      std::string text = src_.substr(pos, open - pos);
      if (open == src_.size()) {
        emit_text(text, pos);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char mod = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (mod == '-') {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.resize(e);
      } else if (mod != '+' && (kind == '%' || kind == '#')) {
        // lstrip_blocks: whitespace between the line start and a block/comment tag is dropped.
        size_t nl = text.rfind('\n');
        size_t ls = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || line_starting) {
          bool blank = true;
          for (size_t k = ls; k < text.size(); ++k)
            if (text[k] != ' ' && text[k] != '\t') blank = false;
          if (blank) text.resize(ls);
        }
      }
      emit_text(text, pos);
      size_t p = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t close = src_.find("#}", p);
        if (close == std::string::npos) throw SyntaxError{"unterminated comment", line_at(open)};
        bool strip = close > p && src_[close - 1] == '-';
        pos = close + 2;
        line_starting = after_tag(pos, strip);
        continue;
      }
      tokens_.push_back({kind == '{' ? Token::kVarBegin : Token::kBlockBegin, "", line_at(open)});
      pos = lex_tag(p, kind == '{');
      line_starting = after_tag(pos, last_strip_, kind == '%');
    }
    tokens_.push_back({Token::kEof, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_at(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  size_t find_open(size_t pos) {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  void emit_text(const std::string& text, size_t pos) {
    if (!text.empty()) tokens_.push_back({Token::kText, text, line_at(pos)});
  }

  // Handles what follows a tag end: "-" strips all whitespace, trim_blocks one newline after
  // block and comment tags. Returns whether the next text starts a line.
  bool after_tag(size_t& pos, bool strip, bool block = true) {
    if (strip) {
      size_t start = pos;
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      return pos > start && src_[pos - 1] == '\n';
    }
    if (block && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
      return true;
    }
    return false;
  }

  size_t lex_tag(size_t p, bool var) {
    int depth = 0;
    int line = line_at(p);
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) throw SyntaxError{var ? "unterminated '{{'" : "unterminated '{%'", line};
      line = line_at(p);
      const char* close = var ? "}}" : "%}";
      if (depth == 0 || !var) {
        if (src_.compare(p, 3, std::string("-") + close) == 0) {
          tokens_.push_back({var ? Token::kVarEnd : Token::kBlockEnd, "", line});
          last_strip_ = true;
          return p + 3;
        }
        if (src_.compare(p, 2, close) == 0) {
          tokens_.push_back({var ? Token::kVarEnd : Token::kBlockEnd, "", line});
          last_strip_ = false;
          return p + 2;
        }
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        tokens_.push_back({Token::kName, src_.substr(s, p - s), line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t s = p;
        bool is_float = false;
        while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            is_float = true;
            p = q;
            while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string num;
        for (size_t k = s; k < p; ++k)
          if (src_[k] != '_') num += src_[k];
        tokens_.push_back({is_float ? Token::kFloat : Token::kInt, num, line});
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Token::kString, lex_string(p), line});
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                    "(", ")", "[", "]", "{", "}", ".", ",", ":", "|", "=", "<", ">"};
        bool found = false;
        for (const char* op : ops) {
          size_t n = std::char_traits<char>::length(op);
          if (src_.compare(p, n, op) == 0) {
            if (op[0] == '{' || op[0] == '(' || op[0] == '[') ++depth;
            if (op[0] == '}' || op[0] == ')' || op[0] == ']') --depth;
            tokens_.push_back({Token::kOp, op, line});
            p += n;
            found = true;
            break;
          }
        }
        if (!found) throw SyntaxError{std::string("unexpected character '") + c + "'", line};
      }
    }
  }

  std::string lex_string(size_t& p) {
    char q = src_[p++];
    std::string out;
    int line = line_at(p);
    while (true) {
      if (p >= src_.size()) throw SyntaxError{"unterminated string", line};
      char c = src_[p++];
      if (c == q) return out;
      if (c != '\\') { out += c; continue; }
      if (p >= src_.size()) throw SyntaxError{"unterminated string", line};
      char e = src_[p++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size()) throw SyntaxError{"bad escape in string", line};
          std::string hex = src_.substr(p, n);
          for (char h : hex)
            if (!std::isxdigit(static_cast<unsigned char>(h))) throw SyntaxError{"bad escape in string", line};
          p += n;
          uint32_t cp = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
          if (cp > 0x10ffff) throw SyntaxError{"bad escape in string", line};
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) { out += char(0xc0 | (cp >> 6)); out += char(0x80 | (cp & 0x3f)); }
          else if (cp < 0x10000) { out += char(0xe0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3f)); out += char(0x80 | (cp & 0x3f)); }
          else { out += char(0xf0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3f)); out += char(0x80 | ((cp >> 6) & 0x3f)); out += char(0x80 | (cp & 0x3f)); }
          break;
        }
        default: out += '\\'; out += e; break;
      }
    }
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
  bool last_strip_ = false;
};

const std::set<std::string>& known_filters() {
  static const std::set<std::string> s = {
      "tojson", "length", "count", "trim", "default", "d", "string", "join", "upper", "lower",
      "safe", "items", "dictsort", "replace", "list", "selectattr", "rejectattr", "select",
      "reject", "indent", "map", "first", "last", "unique", "reverse", "sort", "int", "float",
      "abs", "round", "title", "capitalize", "wordcount", "min", "max", "sum", "escape", "e",
      "attr"};
  return s;
}

const std::set<std::string>& known_tests() {
  static const std::set<std::string> s = {
      "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
      "integer", "float", "boolean", "true", "false", "in", "eq", "equalto", "==", "ne", "!=",
      "lt", "<", "lessthan", "gt", ">", "greaterthan", "le", "<=", "ge", ">=", "odd", "even",
      "divisibleby", "callable", "sameas", "lower", "upper", "escaped", "filter", "test"};
  return s;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, end);
    for (auto& s : b) check_stmt(*s);
    return b;
  }

  // Long operator chains ("a + b + c ...", "x.a.b.c ...") build deep trees that the evaluator
  // walks recursively; bound their depth so no template can exhaust the stack.
  static constexpr int kMaxExprDepth = 400;
  static void check_expr(const Expr* e, int depth) {
    if (!e) return;
    if (depth > kMaxExprDepth) throw SyntaxError{"expression nested too deeply", e->line};
    for (auto& a : e->args) check_expr(a.get(), depth + 1);
    for (auto& [_, a] : e->kwargs) check_expr(a.get(), depth + 1);
  }
  static void check_stmt(const Stmt& s) {
    check_expr(s.expr.get(), 0);
    check_expr(s.loop_filter.get(), 0);
    for (auto& c : s.conds) check_expr(c.get(), 0);
    for (auto& d : s.defaults) check_expr(d.get(), 0);
    for (auto& f : s.filters) {
      for (auto& a : f.args) check_expr(a.get(), 0);
      for (auto& [_, a] : f.kwargs) check_expr(a.get(), 0);
    }
    for (auto& b : s.bodies)
      for (auto& x : b) check_stmt(*x);
    for (auto& x : s.body) check_stmt(*x);
  }

 private:
  const Token& peek(int k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& next() { const Token& tok = t_[p_]; if (p_ + 1 < t_.size()) ++p_; return tok; }
  [[noreturn]] void fail(const std::string& msg) const { throw SyntaxError{msg, peek().line}; }
  bool is_op(const char* op, int k = 0) const { return peek(k).kind == Token::kOp && peek(k).value == op; }
  bool is_name(const char* n, int k = 0) const { return peek(k).kind == Token::kName && peek(k).value == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  static std::string describe(const Token& tok) {
    switch (tok.kind) {
      case Token::kEof: return "end of template";
      case Token::kBlockEnd: return "end of statement block";
      case Token::kVarEnd: return "end of print statement";
      case Token::kText: return "template text";
      default: return "'" + tok.value + "'";
    }
  }
  std::string expect_name() {
    if (peek().kind != Token::kName) fail("expected a name, got " + describe(peek()));
    return next().value;
  }
  void expect_block_end() {
    if (peek().kind != Token::kBlockEnd) fail("expected end of statement block, got " + describe(peek()));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) p->fail("template nesting too deep");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  // Parses statements until a block tag whose name is in `ends`; stores that name in `end`
  // (the tag's name token is consumed, the rest of the tag is not).
  Body parse_body(const std::set<std::string>& ends, std::string& end) {
    DepthGuard g(this);
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == Token::kEof) {
        if (!ends.empty()) fail("unexpected end of template, expected '" + *ends.begin() + "'");
        return body;
      }
      if (tok.kind == Token::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::kText;
        s->line = tok.line;
        s->text = tok.value;
        next();
        body.push_back(std::move(s));
      } else if (tok.kind == Token::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::kOutput;
        s->line = next().line;
        s->expr = parse_expr();
        if (peek().kind != Token::kVarEnd) fail("expected end of print statement, got " + describe(peek()));
        next();
        body.push_back(std::move(s));
      } else if (tok.kind == Token::kBlockBegin) {
        next();
        std::string name = expect_name();
        if (ends.count(name)) {
          end = name;
          return body;
        }
        body.push_back(parse_statement(name));
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  StmtPtr parse_statement(const std::string& name) {
    auto s = std::make_unique<Stmt>();
    s->line = peek().line;
    if (name == "if") {
      s->kind = Stmt::kIf;
      s->conds.push_back(parse_expr());
      expect_block_end();
      ++cond_depth_;
      struct Dec { int& d; ~Dec() { --d; } } dec{cond_depth_};
      while (true) {
        std::string end;
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          s->conds.push_back(parse_expr());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}, end));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (name == "for") {
      s->kind = Stmt::kFor;
      bool paren = is_op("(");
      if (paren) next();
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        s->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(peek()));
      next();
      s->expr = parse_or_expr();  // no inline if/else here: "if" starts the loop filter
      if (is_name("if")) {
        next();
        s->loop_filter = parse_expr();
      }
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"else", "endfor"}, end));
      if (end == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}, end));
      }
      expect_block_end();
    } else if (name == "set") {
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        next();
        s->attr = expect_name();
      } else {
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        s->kind = Stmt::kSet;
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else {
        if (!s->attr.empty() || s->targets.size() != 1) fail("expected '=' in set statement");
        s->kind = Stmt::kSetBlock;
        parse_filter_calls(s->filters);
        expect_block_end();
        std::string end;
        s->body = parse_body({"endset"}, end);
        expect_block_end();
      }
    } else if (name == "macro") {
      s->kind = Stmt::kMacro;
      s->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        s->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          s->defaults.push_back(parse_expr());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(")")) expect_op(",");
      }
      next();
      expect_block_end();
      std::string end;
      s->body = parse_body({"endmacro"}, end);
      if (peek().kind == Token::kName) next();  // {% endmacro name %}
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
      s->kind = name == "break" ? Stmt::kBreak : Stmt::kContinue;
      expect_block_end();
    } else if (name == "filter") {
      s->kind = Stmt::kFilterBlock;
      if (peek().kind != Token::kName) fail("expected a filter name");
      // The first filter has no leading '|'.
      FilterCall fc;
      fc.name = next().value;
      check_filter(fc.name);
      if (is_op("(")) parse_call_args(fc.args, fc.kwargs);
      s->filters.push_back(std::move(fc));
      parse_filter_calls(s->filters);
      expect_block_end();
      std::string end;
      s->body = parse_body({"endfilter"}, end);
      expect_block_end();
    } else if (name == "generation") {
      s->kind = Stmt::kPlain;
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, end);
      expect_block_end();
    } else {
      fail("unsupported statement '" + name + "'");
    }
    return s;
  }

  void parse_filter_calls(std::vector<FilterCall>& out) {
    while (is_op("|")) {
      next();
      FilterCall fc;
      fc.name = expect_name();
      check_filter(fc.name);
      if (is_op("(")) parse_call_args(fc.args, fc.kwargs);
      out.push_back(std::move(fc));
    }
  }

  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // "a, b" without parentheses (set right-hand side) makes a tuple.
  ExprPtr parse_tuple_or_expr() {
    int line = peek().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::kTuple, line);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().kind == Token::kBlockEnd) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {
    DepthGuard g(this);
    int line = peek().line;
    ExprPtr e = parse_or_expr();
    while (is_name("if")) {
      next();
      auto c = make(Expr::kCond, line);
      ExprPtr cond = parse_or_expr();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expr();
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or_expr() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      auto o = make(Expr::kOr, line);
      o->args.push_back(std::move(e));
      o->args.push_back(parse_and());
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      auto o = make(Expr::kAnd, line);
      o->args.push_back(std::move(e));
      o->args.push_back(parse_not());
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(this);
      int line = next().line;
      auto n = make(Expr::kNot, line);
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  // a < b < c means (a < b) and (b < c): one kCompare node with the operands in args and the
  // operators as the names of kwargs.
  ExprPtr parse_compare() {
    int line = peek().line;
    auto chain = make(Expr::kCompare, line);
    chain->args.push_back(parse_math1());
    while (true) {
      std::string op;
      if (peek().kind == Token::kOp &&
          (peek().value == "==" || peek().value == "!=" || peek().value == "<" || peek().value == ">" ||
           peek().value == "<=" || peek().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      chain->kwargs.emplace_back(op, nullptr);
      chain->args.push_back(parse_math1());
    }
    if (chain->kwargs.empty()) return std::move(chain->args[0]);
    if (chain->kwargs.size() == 1) {
      chain->kind = Expr::kBinary;
      chain->name = chain->kwargs[0].first;
      chain->kwargs.clear();
    }
    return chain;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::kBinary, a->line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().value;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      next();
      e = binary("~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().value;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      next();
      e = binary("**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      int line = peek().line;
      std::string op = next().value;
      e = make(Expr::kUnary, line);
      e->name = op;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = peek();
    int line = tok.line;
    if (tok.kind == Token::kName) {
      std::string n = next().value;
      auto e = make(Expr::kLiteral, line);
      if (n == "true" || n == "True") e->literal = Value::boolean(true);
      else if (n == "false" || n == "False") e->literal = Value::boolean(false);
      else if (n == "none" || n == "None") e->literal = Value::none();
      else { e->kind = Expr::kName; e->name = n; }
      return e;
    }
    if (tok.kind == Token::kString) {
      std::string s;
      while (peek().kind == Token::kString) s += next().value;
      auto e = make(Expr::kLiteral, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (tok.kind == Token::kInt || tok.kind == Token::kFloat) {
      auto e = make(Expr::kLiteral, line);
      std::string v = next().value;
      if (tok.kind == Token::kFloat) e->literal = Value::number(std::strtod(v.c_str(), nullptr));
      else e->literal = Value::integer(std::strtoll(v.c_str(), nullptr, 10));
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make(Expr::kTuple, line);
      }
      ExprPtr first = parse_expr();
      if (is_op(")")) {
        next();
        return first;
      }
      auto t = make(Expr::kTuple, line);
      t->args.push_back(std::move(first));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        t->args.push_back(parse_expr());
      }
      expect_op(")");
      return t;
    }
    if (is_op("[")) {
      next();
      auto l = make(Expr::kList, line);
      while (!is_op("]")) {
        l->args.push_back(parse_expr());
        if (!is_op("]")) expect_op(",");
      }
      next();
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = make(Expr::kDict, line);
      while (!is_op("}")) {
        d->args.push_back(parse_expr());
        expect_op(":");
        d->args.push_back(parse_expr());
        if (!is_op("}")) expect_op(",");
      }
      next();
      return d;
    }
    fail("unexpected " + describe(tok));
  }

  void parse_call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::kName && is_op("=", 1)) {
        std::string k = next().value;
        next();
        kwargs.emplace_back(k, parse_expr());
      } else {
        if (!kwargs.empty()) fail("positional argument after keyword argument");
        args.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    next();
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (is_op(".")) {
        next();
        auto a = make(Expr::kAttr, line);
        if (peek().kind == Token::kInt) {
          a->kind = Expr::kIndex;
          a->args.push_back(std::move(e));
          auto idx = make(Expr::kLiteral, line);
          idx->literal = Value::integer(std::strtoll(next().value.c_str(), nullptr, 10));
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (is_op(":")) {
            slice = true;
            next();
            if (++n > 2) fail("too many ':' in slice");
            continue;
          }
          if (is_op("]")) break;
          if (parts[n]) fail("expected ']'");
          parts[n] = parse_expr();
        }
        next();
        if (slice) {
          auto s = make(Expr::kSlice, line);
          s->args.push_back(std::move(e));
          for (auto& p : parts) s->args.push_back(std::move(p));
          e = std::move(s);
        } else {
          if (!parts[0]) fail("empty subscript");
          auto s = make(Expr::kIndex, line);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(parts[0]));
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = make(Expr::kCall, line);
        c->args.push_back(std::move(e));
        std::vector<ExprPtr> args;
        parse_call_args(args, c->kwargs);
        for (auto& a : args) c->args.push_back(std::move(a));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (is_op("|")) {
        next();
        auto f = make(Expr::kFilter, line);
        f->name = expect_name();
        check_filter(f->name);
        f->args.push_back(std::move(e));
        if (is_op("(")) {
          std::vector<ExprPtr> args;
          parse_call_args(args, f->kwargs);
          for (auto& a : args) f->args.push_back(std::move(a));
        }
        e = parse_postfix(std::move(f));
      } else if (is_name("is")) {
        next();
        auto t = make(Expr::kTest, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        if (peek().kind == Token::kName) t->name = next().value;
        else if (peek().kind == Token::kOp && (peek().value == "==" || peek().value == "!=" ||
                                                 peek().value == "<" || peek().value == ">" ||
                                                 peek().value == "<=" || peek().value == ">="))
          t->name = next().value;
        else fail("expected a test name after 'is'");
        if (!is_known_test(t->name) && cond_depth_ == 0) fail("no test named '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          std::vector<ExprPtr> args;
          parse_call_args(args, t->kwargs);
          for (auto& a : args) t->args.push_back(std::move(a));
        } else if ((peek().kind == Token::kName && !is_name("else") && !is_name("or") &&
                    !is_name("and") && !is_name("if") && !is_name("in") && !is_name("not") &&
                    !is_name("is")) ||
                   peek().kind == Token::kString || peek().kind == Token::kInt ||
                   peek().kind == Token::kFloat || is_op("[") || is_op("{") || is_op("-")) {
          t->args.push_back(parse_postfix(parse_primary_or_neg()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_primary_or_neg() {
    if (is_op("-")) {
      int line = next().line;
      auto u = make(Expr::kUnary, line);
      u->name = "-";
      u->args.push_back(parse_primary());
      return u;
    }
    return parse_primary();
  }

  // Like jinja2 >= 3.0: an unknown filter or test inside a conditionally executed block is an
  // error only when it runs; elsewhere it is a compile error.
  void check_filter(const std::string& name) {
    if (is_unimplemented_builtin_filter(name)) fail("filter '" + name + "' is not supported");
    if (!is_known_filter(name) && cond_depth_ == 0) fail("no filter named '" + name + "'");
  }

  std::vector<Token> t_;
  int cond_depth_ = 0;
  size_t p_ = 0;
  int depth_ = 0;

 public:
  int loop_depth_ = 1;  // break/continue validity is checked at render time
};

}  // namespace

bool is_known_filter(const std::string& name) { return known_filters().count(name) > 0; }

// jinja2 filters this engine does not implement: always a parse error.
bool is_unimplemented_builtin_filter(const std::string& name) {
  static const std::set<std::string> s = {
      "batch", "center", "format", "truncate", "striptags", "forceescape", "pprint", "urlencode",
      "wordwrap", "xmlattr", "filesizeformat", "groupby", "random", "slice", "urlize"};
  return s.count(name) > 0;
}
bool is_known_test(const std::string& name) { return known_tests().count(name) > 0; }

StatusOr<Body> parse_template(std::string_view source) {
  try {
    Lexer lexer(source);
    Parser parser(lexer.run());
    return parser.parse_all();
  } catch (const SyntaxError& e) {
    return invalid_argument("chat template syntax error at line " + std::to_string(e.line) + ": " +
                            e.message);
  }
}

}  // namespace llmrt::jinja
