//! What the command lines of mcrd and its workers share.

use mcr_core::named::Named;

/// A setting written by name (see [`mcr_core::named`]): its names are the
/// possible values that clap checks, lists in `--help` and completes.
pub(crate) fn named_arg<T: Named + Clone + Send + Sync>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(mcr_core::named::names::<T>())
        .try_map(|s: String| mcr_core::named::parse_name::<T>(&s))
}
