//! Shortening text for places with a size limit or a one-line format:
//! condition messages, Event notes, CLI errors.

/// At most `max` bytes, cut on a character boundary; a cut text ends in
/// "..." so a reader knows it was cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Runs of whitespace, newlines included, become one space: wasmtime and
/// anyhow errors span several lines, a condition message should not.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_characters_whole_and_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdefghij", 8), "abcde...");
        let cut = truncate("ééééé", 8);
        assert!(cut.len() <= 8 && cut.ends_with("..."), "{cut}");
    }

    #[test]
    fn one_line_joins_lines() {
        assert_eq!(one_line("a\n  caused by:\n\tb "), "a caused by: b");
    }
}
