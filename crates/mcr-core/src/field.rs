//! Which part of a rule a refusal is about: `input.destination`,
//! `outputs[2].ttl` and so on, as the control protocol and the config
//! file's error positions name them, kept as a value rather than a string
//! to be taken apart again.

use std::fmt;

/// A field of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Its name.
    Name,
    /// Its (first) input, or a part of it.
    Input(Part),
    /// Its mode of redundancy and that mode's settings.
    Redundancy,
    /// Its other input `index` (from 0: the rule's second input), or a
    /// part of it.
    OtherInput(usize, Part),
    /// The list of outputs as a whole.
    Outputs,
    /// Output `index` (from 0), or a part of it.
    Output(usize, Part),
}

/// A part of an input or an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole of it.
    Whole,
    /// Its interface.
    Interface,
    /// Its destination address and port.
    Destination,
    /// Its source (an input's senders, an output's source address).
    Source,
    /// Its VLAN.
    Vlan,
    /// An output's TTL.
    Ttl,
}

impl Part {
    fn name(self) -> Option<&'static str> {
        match self {
            Part::Whole => None,
            Part::Interface => Some("interface"),
            Part::Destination => Some("destination"),
            Part::Source => Some("source"),
            Part::Vlan => Some("vlan"),
            Part::Ttl => Some("ttl"),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |f: &mut fmt::Formatter<'_>, p: Part| match p.name() {
            Some(n) => write!(f, ".{n}"),
            None => Ok(()),
        };
        match *self {
            Field::Name => f.write_str("name"),
            Field::Input(p) => {
                f.write_str("input")?;
                part(f, p)
            }
            Field::Redundancy => f.write_str("redundancy"),
            Field::OtherInput(i, p) => {
                write!(f, "redundancy.inputs[{i}]")?;
                part(f, p)
            }
            Field::Outputs => f.write_str("outputs"),
            Field::Output(i, p) => {
                write!(f, "outputs[{i}]")?;
                part(f, p)
            }
        }
    }
}

impl Field {
    /// Input `k` of a rule (0: the first, `input`; then those of
    /// `redundancy.inputs`), or a part of it.
    pub fn input(k: usize, p: Part) -> Field {
        match k {
            0 => Field::Input(p),
            k => Field::OtherInput(k - 1, p),
        }
    }
}

/// For tests and callers that hold the name: compares with what it
/// prints as.
impl PartialEq<&str> for Field {
    fn eq(&self, other: &&str) -> bool {
        let printed = self.to_string();
        printed == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_print_as_the_protocol_names_them() {
        assert_eq!(Field::Name.to_string(), "name");
        assert_eq!(Field::Input(Part::Whole).to_string(), "input");
        assert_eq!(Field::Input(Part::Destination).to_string(), "input.destination");
        assert_eq!(Field::input(2, Part::Source).to_string(), "redundancy.inputs[1].source");
        assert_eq!(Field::Redundancy.to_string(), "redundancy");
        assert_eq!(Field::Outputs.to_string(), "outputs");
        assert_eq!(Field::Output(2, Part::Whole).to_string(), "outputs[2]");
        assert_eq!(Field::Output(0, Part::Ttl).to_string(), "outputs[0].ttl");
        assert_eq!(Field::Output(3, Part::Vlan), "outputs[3].vlan");
    }
}
