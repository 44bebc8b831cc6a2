//! Colour for terminals, and nothing for pipes, files or `NO_COLOR` (no-color.org).
//!
//! Plain ANSI codes: the few styles we use do not justify a colour crate.

use std::io::IsTerminal;

/// Whether to colour; cheap to copy into every renderer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub enabled: bool,
}

impl Style {
    pub const PLAIN: Style = Style { enabled: false };

    /// Colour for stdout when it is a terminal and `NO_COLOR` is unset or empty.
    #[allow(clippy::disallowed_methods)] // only asks whether it is a terminal
    pub fn for_stdout() -> Style {
        Style::detect(std::io::stdout().is_terminal())
    }

    /// Colour for stderr when it is a terminal and `NO_COLOR` is unset or empty.
    #[allow(clippy::disallowed_methods)] // only asks whether it is a terminal
    pub fn for_stderr() -> Style {
        Style::detect(std::io::stderr().is_terminal())
    }

    fn detect(is_terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Style {
            enabled: is_terminal && !no_color && !dumb,
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }
    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }

    /// A run status in the colour of what it asks of the reader: green done, yellow
    /// waiting for someone, red broken.
    pub fn status(self, status: crate::records::RunStatus) -> String {
        use crate::records::RunStatus as S;
        let s = status.as_str();
        match status {
            S::Completed => self.green(s),
            S::Running | S::Queued => self.cyan(s),
            S::AwaitingApproval | S::Escalated | S::BudgetExhausted | S::Interrupted => {
                self.yellow(s)
            }
            S::Failed | S::Cancelled => self.red(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_style_adds_no_escape_codes() {
        assert_eq!(Style::PLAIN.red("x"), "x");
        assert_eq!(Style { enabled: true }.red("x"), "\x1b[31mx\x1b[0m");
    }
}
