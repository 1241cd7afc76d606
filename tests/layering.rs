//! The folders of `src/` import one way: each only from the folders below it in [`ORDER`], so
//! the request path reads top to bottom and no change can quietly tie two parts into a circle.
//! ARCHITECTURE.md draws the same order, and a test holds it to this one.

use std::collections::BTreeSet;
use std::path::Path;

/// From the top of the house to the bottom; a folder may import only from folders after it.
const ORDER: &[&str] = &[
    "cli",
    "app",
    "config",
    "http",
    "a2a",
    "backend",
    "push",
    "admin",
    "authz",
    "layers",
    "telemetry",
    "guard",
    "shared",
    "store",
    "jose",
    "tlog",
    "content",
    "net",
    "units",
    "clock",
    "protocol",
    "token",
    "locks",
];

/// Every `crate::<folder>` a source text names outside comments and its test module, including
/// each folder of a grouped `use crate::{a::x, b::{y, z}}` over several lines.
fn imported_folders(text: &str) -> BTreeSet<String> {
    let code: String = without_test_items(text)
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first identifier of each part at the group's own depth.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        found.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.remove("");
    found
}

/// `text` without the items marked `#[cfg(test)]`: a `mod tests;` to its `;`, any other item
/// to the brace that closes its body (braces inside strings and comments are not told apart,
/// which this source does not need).
fn without_test_items(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at..];
        let (brace, semicolon) = (item.find('{'), item.find(';'));
        let end = match (brace, semicolon) {
            (Some(open), Some(semi)) if semi < open => semi + 1,
            (Some(open), _) => closing_brace(item, open),
            (None, Some(semi)) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    kept.push_str(rest);
    kept
}

/// Just past the brace that closes the one at `open`.
fn closing_brace(text: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => return open + i + 1,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_folder_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let rank = |folder: &str| ORDER.iter().position(|f| *f == folder);
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let folder = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        // The binary, the library root and the fuzzing entry points stand above everything.
        let Some(from) = rank(&folder) else {
            assert!(
                ["main", "lib", "fuzzing"].contains(&folder.as_str()),
                "{folder} is not in ORDER: place it there"
            );
            continue;
        };
        for imported in imported_folders(&std::fs::read_to_string(file).unwrap()) {
            if imported == folder {
                continue;
            }
            let to = rank(&imported).unwrap_or_else(|| {
                panic!(
                    "{} imports crate::{imported}, not in ORDER",
                    relative.display()
                )
            });
            if to <= from {
                upward.push(format!("{} imports crate::{imported}", relative.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the order:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_sees_plain_grouped_and_inline_imports_but_not_comments_or_tests() {
    let text = "use crate::a::X;\nuse crate::{\n    b::{Y, Z},\n    c,\n};\nfn f() { crate::d::g(); } // crate::e\n#[cfg(test)]\nmod tests { fn t() { crate::f::x(); } }\n#[cfg(test)]\nmod more;\nuse crate::g::Y;\n";
    let found: Vec<String> = imported_folders(text).into_iter().collect();
    assert_eq!(
        found,
        ["a", "b", "c", "d", "g"],
        "a test item ends at its closing brace"
    );
}

#[test]
fn architecture_md_draws_the_order_this_test_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let drawing = text
        .split("```")
        .nth(1)
        .expect("ARCHITECTURE.md draws the folders");
    // Each line of the drawing that starts with a folder's name and a slash, or a file's.
    let drawn: Vec<&str> = drawing
        .lines()
        .filter(|line| !line.starts_with(char::is_whitespace))
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|first| first.strip_suffix('/').or(first.strip_suffix(".rs")))
        .collect();
    let held: Vec<&str> = ORDER.iter().copied().filter(|f| *f != "cli").collect();
    assert_eq!(
        drawn, held,
        "ARCHITECTURE.md's folders, top to bottom, are ORDER's"
    );
}

/// The policy is read by the composition root and the command line only: every part below is
/// handed its own settings (`src/app/settings.rs`), so `config` stands right under `app` and
/// the order above refuses any other folder that imports it.
#[test]
fn only_the_composition_root_and_the_cli_import_the_policy() {
    assert_eq!(
        ORDER[..3],
        ["cli", "app", "config"],
        "config is imported by app and cli only"
    );
}
