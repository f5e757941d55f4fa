//! Settings that are written by name — in the config file, on `mcrd`'s
//! command line and in what mcrd passes to its workers — each as one enum
//! with one list of names, so that parsing, printing and the help text
//! cannot drift apart.

/// An enum whose every value has one name.
pub trait Named: Copy + Sized + 'static {
    /// Every value with its name, in the order the help text lists them.
    const ALL: &'static [(Self, &'static str)];
    /// What a value of it is, for error messages ("ring format").
    const WHAT: &'static str;
}

/// A name that is none of an enum's: says which names it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{given}` is unknown: write {choices}")]
pub struct UnknownName {
    /// What was being named.
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// The names it takes, written as a list ("v2 or v3").
    pub choices: String,
}

/// The names of `T`, in order.
pub fn names<T: Named>() -> impl Iterator<Item = &'static str> {
    T::ALL.iter().map(|(_, n)| *n)
}

/// The name of `value`.
pub fn name_of<T: Named + PartialEq>(value: T) -> &'static str {
    T::ALL.iter().find(|(v, _)| *v == value).map_or("?", |(_, n)| n)
}

/// The value named `s`.
pub fn parse_name<T: Named>(s: &str) -> Result<T, UnknownName> {
    T::ALL
        .iter()
        .find(|(_, n)| *n == s)
        .map(|(v, _)| *v)
        .ok_or_else(|| UnknownName {
            what: T::WHAT,
            given: s.to_string(),
            choices: choice_list(&names::<T>().collect::<Vec<_>>()),
        })
}

/// "a", "a or b", "a, b or c".
fn choice_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// Gives a [`Named`] enum `Display` and `FromStr` by its names.
macro_rules! named {
    ($ty:ty, $what:literal, [$(($value:expr, $name:literal)),+ $(,)?]) => {
        impl $crate::named::Named for $ty {
            const ALL: &'static [(Self, &'static str)] = &[$(($value, $name)),+];
            const WHAT: &'static str = $what;
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::named::name_of(*self))
            }
        }
        impl std::str::FromStr for $ty {
            type Err = $crate::named::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::named::parse_name(s)
            }
        }
    };
}
pub(crate) use named;

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::str::FromStr;

    use super::*;
    use crate::config::{Datapath, LogFormat, LogLevel, RingFormat, Role};

    fn round_trip<T: Named + PartialEq + fmt::Debug + fmt::Display + FromStr<Err = UnknownName>>() {
        for (v, n) in T::ALL {
            assert_eq!(v.to_string(), *n);
            assert_eq!(n.parse::<T>(), Ok(*v));
        }
    }

    #[test]
    fn every_name_prints_and_parses_back() {
        round_trip::<LogLevel>();
        round_trip::<LogFormat>();
        round_trip::<Datapath>();
        round_trip::<RingFormat>();
        round_trip::<Role>();
    }

    #[test]
    fn an_unknown_name_says_which_it_takes() {
        let e = "v4".parse::<RingFormat>().unwrap_err();
        assert_eq!(e.to_string(), "ring format `v4` is unknown: write v2 or v3");
        let e = "xml".parse::<LogFormat>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "log format `xml` is unknown: write text, json or journal"
        );
    }

    #[test]
    fn the_names_are_the_config_files() {
        // The config file reads them through serde: the same names.
        for (v, n) in RingFormat::ALL {
            let parsed: toml::Value = toml::from_str(&format!("x = \"{n}\"")).expect("toml");
            let back: RingFormat = parsed["x"].clone().try_into().expect("serde name");
            assert_eq!(back, *v);
        }
        for (v, n) in LogLevel::ALL {
            let parsed: toml::Value = toml::from_str(&format!("x = \"{n}\"")).expect("toml");
            let back: LogLevel = parsed["x"].clone().try_into().expect("serde name");
            assert_eq!(back, *v);
        }
    }
}
