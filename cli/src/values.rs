//! Value parsers shared by the subcommands' options.

/// A count of at least 1 (`--runs`, `--batch`, `--concurrent`, ...).
pub fn positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a count >= 1".into()),
    }
}

/// The items of a comma-separated option value such as `--pairs a,b`.
#[derive(Clone, Debug, PartialEq)]
pub struct Csv(pub Vec<String>);

/// A comma-separated list of at least one item; empty items are dropped.
pub fn list(s: &str) -> Result<Csv, String> {
    let v: Vec<String> = s.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    if v.is_empty() { Err("expected a comma-separated list".into()) } else { Ok(Csv(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lists() {
        assert_eq!(positive("3"), Ok(3));
        assert!(positive("0").is_err());
        assert!(positive("abc").is_err());
        assert!(positive("-1").is_err());
        assert_eq!(list("a, b,,c"), Ok(Csv(vec!["a".to_string(), "b".into(), "c".into()])));
        assert!(list(" , ").is_err());
    }
}
