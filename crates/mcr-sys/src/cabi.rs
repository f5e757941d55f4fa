//! Hand-written mirrors of C structs and constants (the bindings to libsrt
//! and librist), checked twice: each mirror asserts its offsets and size at
//! compile time, and each library's `abi_check.c` (compiled by build.rs
//! against the installed header) asserts the same numbers in C. The tests
//! ([`check`]) hold that the two lists agree line by line, so a header that
//! changes stops the build instead of corrupting memory.

/// Declares a `#[repr(C)]` mirror of a C struct. Each field carries its byte
/// offset and C type; the offsets and the size are asserted at compile time,
/// and `LAYOUT` lists them for the test that compares them with
/// `abi_check.c`.
macro_rules! c_struct {
    (
        $(#[$meta:meta])*
        pub(crate) struct $name:ident as $cname:literal, size $size:literal {
            $( $field:ident : $ty:ty = $off:literal as $cty:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub(crate) struct $name {
            $( pub(crate) $field: $ty, )*
        }

        const _: () = {
            assert!(std::mem::size_of::<$name>() == $size);
            $( assert!(std::mem::offset_of!($name, $field) == $off); )*
        };

        #[cfg(test)]
        impl $name {
            /// The C type name, its size, and (field, C type, Rust type,
            /// offset) for each field.
            pub(crate) const LAYOUT: crate::cabi::check::Layout =
                ($cname, $size, &[$( (stringify!($field), $cty, stringify!($ty), $off) ),*]);
        }
    };
}
pub(crate) use c_struct;

/// Declares integer constants copied from the header, and (for the tests)
/// a table of them to compare with `abi_check.c`.
macro_rules! c_consts {
    ($table:ident { $( $name:ident : $ty:ty = $val:expr ; )* }) => {
        $( pub(crate) const $name: $ty = $val; )*

        #[cfg(test)]
        #[allow(clippy::cast_lossless, clippy::cast_possible_wrap)]
        pub(crate) const $table: &[(&str, i64)] = &[$( (stringify!($name), $name as i64) ),*];
    };
}
pub(crate) use c_consts;

#[cfg(test)]
pub(crate) mod check {
    use std::collections::BTreeMap;

    /// A mirrored struct: its C name, its size, and (field, C type, Rust
    /// type, offset) for each field.
    pub(crate) type Layout = (
        &'static str,
        usize,
        &'static [(&'static str, &'static str, &'static str, usize)],
    );

    /// The arguments of every `NAME(...)` line of an abi_check.c.
    fn c_lines(src: &str, name: &str) -> Vec<Vec<String>> {
        let prefix = format!("{name}(");
        src.lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|rest| {
                let args = rest.strip_suffix(");").expect("a line ends with `);`");
                args.split(',').map(|a| a.trim().to_string()).collect()
            })
            .collect()
    }

    /// Asserts that `layouts` are exactly the `FIELD` and `SIZE` lines of
    /// `src`, each field's Rust type the one `rust_type_for` its C type.
    pub(crate) fn structs_match(src: &str, layouts: &[Layout], rust_type_for: fn(&str) -> &'static str) {
        let mut rust_fields = BTreeMap::new();
        let mut rust_sizes = BTreeMap::new();
        for &(cname, size, fields) in layouts {
            rust_sizes.insert(cname.to_string(), size);
            for &(field, c_type, rust_type, off) in fields {
                assert_eq!(rust_type, rust_type_for(c_type), "{cname}.{field}");
                // A C field named like a Rust keyword is mirrored as `r#name`.
                let field = field.trim_start_matches("r#");
                rust_fields.insert((cname.to_string(), field.to_string()), (c_type.to_string(), off));
            }
        }
        let c_fields: BTreeMap<_, _> = c_lines(src, "FIELD")
            .into_iter()
            .map(|a| {
                (
                    (a[0].clone(), a[1].clone()),
                    (a[2].clone(), a[3].parse::<usize>().expect("offset")),
                )
            })
            .collect();
        let c_sizes: BTreeMap<_, _> = c_lines(src, "SIZE")
            .into_iter()
            .map(|a| (a[0].clone(), a[1].parse::<usize>().expect("size")))
            .collect();
        assert_eq!(rust_fields, c_fields);
        assert_eq!(rust_sizes, c_sizes);
    }

    /// Asserts that `consts` are exactly the `VALUE` lines of `src`.
    pub(crate) fn constants_match(src: &str, consts: &[(&str, i64)]) {
        let rust: BTreeMap<_, _> = consts.iter().map(|&(n, v)| (n.to_string(), v)).collect();
        let c: BTreeMap<_, _> = c_lines(src, "VALUE")
            .into_iter()
            .map(|a| {
                let v = &a[1];
                let v = match v.strip_prefix("0x") {
                    Some(hex) => i64::from_str_radix(hex, 16),
                    None => v.parse(),
                };
                (a[0].clone(), v.expect("a number"))
            })
            .collect();
        assert_eq!(rust, c);
    }
}
