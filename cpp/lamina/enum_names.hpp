// lamina/enum_names.hpp — internal to cpp/: an enum's spellings written once, as a table of
// (value, name) rows that both its parser and its name function read. A value's first row
// holds its canonical name; later rows of the same value are accepted aliases.
#pragma once

#include <cstddef>
#include <string>

#include "lamina/common.hpp"

namespace lamina {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

/// The canonical (first) name of `v` in `table`; "?" when `v` has no row.
template <class E, std::size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const EnumName<E>& row : table)
    if (row.value == v) return row.name;
  return "?";
}

/// The value spelt `name` in `table` (canonical name or alias); nullptr when none is.
template <class E, std::size_t N>
const E* enum_find(const EnumName<E> (&table)[N], const std::string& name) {
  for (const EnumName<E>& row : table)
    if (name == row.name) return &row.value;
  return nullptr;
}

/// The value spelt `name` in `table`; otherwise throws ValueError(unknown()), the caller's
/// message (built only on that path).
template <class E, std::size_t N, class Message>
E enum_parse(const EnumName<E> (&table)[N], const std::string& name, Message unknown) {
  if (const E* v = enum_find(table, name)) return *v;
  throw ValueError(unknown());
}

}  // namespace lamina
