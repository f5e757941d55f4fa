/* The assertion macros of the ABI guards (srt/abi_check.c,
 * rist/abi_check.c): each guard defines ABI_BINDINGS (where its Rust
 * bindings are, for the messages) and includes this file.
 *
 * FIELD(C type, field, C field type, byte offset): the field is at that
 * offset and of that type (arrays included, compared through a pointer to
 * the field so that they do not decay); SIZE(C type, bytes);
 * VALUE(constant, value). */

#include <stddef.h>
#include <stdint.h>

#define FIELD(type, field, ctype, offset)                                      \
    _Static_assert(offsetof(type, field) == (offset) &&                        \
                       _Generic(&((type *)0)->field, __typeof__(ctype) *: 1,   \
                                default: 0),                                   \
                   #type "." #field " is not a " #ctype " at " #offset         \
                   ": update " ABI_BINDINGS " (the library's header changed)")
#define SIZE(type, bytes)                                                      \
    _Static_assert(sizeof(type) == (bytes),                                    \
                   "sizeof(" #type ") is not " #bytes                          \
                   ": update " ABI_BINDINGS " (the library's header changed)")
#define VALUE(name, value)                                                     \
    _Static_assert((long long)(name) == (long long)(value),                    \
                   #name " is not " #value                                     \
                   ": update " ABI_BINDINGS " (the library's header changed)")
