"""The spec expression language: lexer, parser (one AST, a whitelist), type check, and the
compiler to Lua and Python."""
