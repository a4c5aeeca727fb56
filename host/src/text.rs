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

/// Each layer's own text, outermost first, joined by ": ", without the
/// repeats of layers that quote their source in their own text.
#[derive(Default)]
pub struct Layers(Vec<String>);

impl Layers {
    pub fn push(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() || self.0.iter().any(|t| t.contains(text)) {
            return;
        }
        self.0.push(text.to_owned());
    }

    pub fn joined(&self) -> String {
        self.0.join(": ")
    }
}

/// An error and its causes as one text: "error sending request" alone does
/// not say that a certificate was refused, or why. Bounded, so a cyclic
/// chain cannot hang the caller.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut layers = Layers::default();
    let mut next = Some(e);
    for _ in 0..32 {
        let Some(e) = next else { break };
        layers.push(&e.to_string());
        next = e.source();
    }
    layers.joined()
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
    fn an_error_chain_says_each_layer_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&e), "error sending request: connection refused");
        #[derive(Debug, thiserror::Error)]
        #[error("request failed: {0}")]
        struct Quoting(#[source] std::io::Error);
        let e = Quoting(std::io::Error::other("reset"));
        assert_eq!(error_chain(&e), "request failed: reset");
    }

    #[test]
    fn one_line_joins_lines() {
        assert_eq!(one_line("a\n  caused by:\n\tb "), "a caused by: b");
    }
}
