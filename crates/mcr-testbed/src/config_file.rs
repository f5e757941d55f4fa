//! Config files for `mcrd` in tests: `[[rule]]` tables written from
//! (name, input, outputs), and the chain's usual streams as rules.

/// A `[daemon]` table that only sets the log level, to start a file with.
pub const HEAD: &str = "[daemon]\nlog_level = \"info\"\n\n";

/// A rule as a test writes it: name, input, outputs.
pub type RuleText = (String, String, Vec<String>);

/// `[[rule]]` tables for `rules`.
pub fn rules_toml(rules: &[RuleText]) -> String {
    let mut t = String::new();
    for (name, input, outputs) in rules {
        let outs: Vec<String> = outputs.iter().map(|o| format!("\"{o}\"")).collect();
        t.push_str(&format!(
            "[[rule]]\nname = \"{name}\"\ninput = \"{input}\"\noutputs = [{}]\n\n",
            outs.join(", ")
        ));
    }
    t
}

/// Rule `s{i}` of the chain ([`crate::presets::Chain`]): 239.1.1.i:5000+i
/// on veth1 to 239.10.1.i:6000+i on veth2.
pub fn stream_rule(i: u32) -> RuleText {
    (
        format!("s{i}"),
        format!("veth1:239.1.1.{i}:{}", 5000 + i),
        vec![format!("veth2:239.10.1.{i}:{}", 6000 + i)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_parse_as_the_rules_they_were_written_from() {
        let text = format!("{HEAD}{}", rules_toml(&[stream_rule(1), stream_rule(2)]));
        let c = mcr_core::config::Config::parse(&text).expect("parses");
        let names: Vec<&str> = c.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["s1", "s2"]);
        assert_eq!(c.rules[1].input.to_string(), "veth1:239.1.1.2:5002");
    }
}
