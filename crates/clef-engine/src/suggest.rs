//! "Did you mean …?" suggestions for misspelled names.

/// The closest candidate to `word`, when it is close enough to be a likely typo.
pub fn did_you_mean<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let mut best: Option<(&str, f64)> = None;
    for c in candidates {
        let score = strsim::jaro_winkler(&word.to_lowercase(), &c.to_lowercase());
        if score >= 0.8 && best.is_none_or(|(_, s)| score > s) {
            best = Some((c, score));
        }
    }
    best.map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("lenght", ["len", "lower", "length"]), Some("length"));
        assert_eq!(did_you_mean("upper", ["len", "lower"]), None);
    }
}
