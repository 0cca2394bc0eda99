//! Code extraction from a Markdown completion.
//!
//! Order (first that yields code wins):
//! 1. the longest fenced block whose tag names the language (name, alias or fence tag);
//! 2. the longest untagged fenced block;
//! 3. the longest fenced block of any tag;
//! 4. the raw completion.
//!
//! A fence left open at the end (a truncated completion) counts as a block
//! running to the end. Ties go to the later block (models put the final
//! answer last).

/// One fenced block: its tag (first word of the info string, lower-cased) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block<'a> {
    pub tag: String,
    pub body: &'a str,
}

/// The fenced blocks of `text`, in order.
pub fn blocks(text: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut open: Option<(char, usize, String, usize)> = None; // fence char, fence length, tag, body start
    while pos < text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
        let line = &text[pos..end];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let (Some(c), true) = (fence_char, indent <= 3) {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                let info = trimmed[run..].trim();
                match &open {
                    Some((oc, olen, tag, start)) if *oc == c && run >= *olen && info.is_empty() => {
                        let body_end = pos.saturating_sub(1).max(*start);
                        out.push(Block {
                            tag: tag.clone(),
                            body: &text[*start..body_end],
                        });
                        open = None;
                    }
                    Some(_) => {}
                    None if !(c == '`' && info.contains('`')) => {
                        let tag = info.split_whitespace().next().unwrap_or("").to_lowercase();
                        let start = (end + 1).min(text.len());
                        open = Some((c, run, tag, start));
                    }
                    None => {}
                }
            }
        }
        pos = end + 1;
    }
    if let Some((_, _, tag, start)) = open {
        out.push(Block {
            tag,
            body: text[start.min(text.len())..].trim_end_matches('\n'),
        });
    }
    out
}

fn longest<'a, 'b>(it: impl Iterator<Item = &'b Block<'a>>) -> Option<&'b Block<'a>>
where
    'a: 'b,
{
    // max_by_key returns the last of equal maxima: ties go to the later block.
    it.filter(|b| !b.body.trim().is_empty()).max_by_key(|b| b.body.len())
}

/// The code to run for `completion` in a language known by `tags` (lower-case).
pub fn extract<'a>(completion: &'a str, tags: &[String]) -> &'a str {
    let all = blocks(completion);
    longest(all.iter().filter(|b| tags.contains(&b.tag)))
        .or_else(|| longest(all.iter().filter(|b| b.tag.is_empty())))
        .or_else(|| longest(all.iter()))
        .map_or(completion, |b| b.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py() -> Vec<String> {
        vec!["python".into(), "py".into(), "python3".into()]
    }

    #[test]
    fn language_block_wins_over_others() {
        let c = "Here:\n```bash\necho hi there everyone\n```\nand\n```python\nprint(1)\n```\n";
        assert_eq!(extract(c, &py()), "print(1)");
    }

    #[test]
    fn untagged_then_any_then_raw() {
        assert_eq!(
            extract("x\n```\na = 1\n```\n```js\nlonger = 1;;;;\n```", &py()),
            "a = 1"
        );
        assert_eq!(extract("x\n```js\nlet a = 1;\n```\n", &py()), "let a = 1;");
        assert_eq!(extract("print(2)\n", &py()), "print(2)\n");
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        let c = "```cpp\nint f() {\n    return 1;\n}";
        assert_eq!(extract(c, &["cpp".into()]), "int f() {\n    return 1;\n}");
    }

    #[test]
    fn longest_matching_and_later_on_ties() {
        let c = "```python\na=1\n```\n```python\nb=22\n```\n```python\nc=33\n```";
        assert_eq!(extract(c, &py()), "c=33");
        let c = "```py\nshort\n```\n```Python title\nmuch longer code\n```";
        assert_eq!(extract(c, &py()), "much longer code");
    }

    #[test]
    fn tildes_longer_fences_and_inner_backticks() {
        let c = "~~~python\nx = '```'\n~~~\n";
        assert_eq!(extract(c, &py()), "x = '```'");
        let c = "````python\n```\ninner\n```\n````";
        assert_eq!(extract(c, &py()), "```\ninner\n```");
    }

    #[test]
    fn empty_blocks_are_ignored() {
        let c = "```python\n```\n```\nreal()\n```";
        assert_eq!(extract(c, &py()), "real()");
    }
}
