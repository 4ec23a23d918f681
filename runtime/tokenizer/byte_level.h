// GPT-2 byte-level mapping and small UTF-8 helpers shared by the tokenizer pieces.
//
// Byte-level BPE vocabularies spell every byte as one printable Unicode character: the 188
// printable Latin-1 bytes stand for themselves, the remaining 68 (controls, space, 0x7F-0xA0,
// 0xAD) map in byte order to U+0100, U+0101, ... so a space is "Ġ" (U+0120) and "\n" is "Ċ".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmrt {

/// The code point that stands for `byte` in a byte-level vocabulary.
uint32_t byte_to_code_point(uint8_t byte);
/// The byte a code point stands for, or -1 if it is not one of the 256.
int code_point_to_byte(uint32_t code_point);

/// Appends the byte-level spelling of `bytes` (each byte → its code point in UTF-8).
void append_byte_level(std::string_view bytes, std::string* out);
/// Undoes append_byte_level. Characters outside the mapping are copied unchanged (returns false
/// if any were met, e.g. a token that is not byte-level text).
bool append_bytes_from_byte_level(std::string_view text, std::string* out);

/// Appends the UTF-8 encoding of `code_point`.
void append_utf8(uint32_t code_point, std::string* out);

/// Length of the UTF-8 sequence starting at text[pos] if it is valid and complete, else 0.
/// Rejects overlong forms, surrogates and code points above U+10FFFF.
size_t valid_utf8_length(std::string_view text, size_t pos);
/// Decodes the valid sequence of `len` bytes at text[pos] (as returned by valid_utf8_length).
uint32_t decode_utf8(std::string_view text, size_t pos, size_t len);
/// Byte offset of the first invalid or truncated UTF-8 sequence, or npos if `text` is valid.
size_t find_invalid_utf8(std::string_view text);
/// True if text[pos..] is a proper prefix of some valid UTF-8 sequence (more bytes could
/// complete it).
bool is_incomplete_utf8_prefix(std::string_view text, size_t pos);

}  // namespace llmrt
