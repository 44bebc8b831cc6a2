//! A line diff (longest common subsequence) of what a case recorded against what the
//! run does now: `-` lines were recorded and are gone, `+` lines are new, and the lines
//! both share are kept as context. Cases are tens of lines, so the quadratic table is
//! small.

/// One line of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Same(String),
    Gone(String),
    New(String),
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Line::Same(l) => write!(f, "  {l}"),
            Line::Gone(l) => write!(f, "- {l}"),
            Line::New(l) => write!(f, "+ {l}"),
        }
    }
}

/// The diff of `old` against `new`; `None` when they are equal.
pub fn diff(old: &[String], new: &[String]) -> Option<Vec<Line>> {
    if old == new {
        return None;
    }
    let (n, m) = (old.len(), new.len());
    // lcs[i][j]: the longest common subsequence of old[i..] and new[j..].
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if old[i] == new[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            out.push(Line::Same(old[i].clone()));
            (i, j) = (i + 1, j + 1);
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(Line::New(new[j].clone()));
            j += 1;
        } else {
            out.push(Line::Gone(old[i].clone()));
            i += 1;
        }
    }
    // A changed line reads best as "- old" then "+ new": move each run of new lines
    // after the gone lines it sits beside.
    Some(gone_before_new(out))
}

fn gone_before_new(lines: Vec<Line>) -> Vec<Line> {
    let mut out = Vec::with_capacity(lines.len());
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    for l in lines {
        match l {
            Line::Gone(_) => gone.push(l),
            Line::New(_) => new.push(l),
            Line::Same(_) => {
                out.append(&mut gone);
                out.append(&mut new);
                out.push(l);
            }
        }
    }
    out.append(&mut gone);
    out.append(&mut new);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn equal_lines_have_no_diff() {
        assert_eq!(diff(&lines("a b"), &lines("a b")), None);
    }

    #[test]
    fn a_changed_line_shows_as_gone_then_new_between_context() {
        let d = diff(&lines("a b c"), &lines("a x c d")).unwrap();
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["  a", "- b", "+ x", "  c", "+ d"]);
    }
}
