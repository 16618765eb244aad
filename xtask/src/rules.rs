//! `cargo xtask rules`: every rule id the repository cites is stated in it.
//!
//! `docs/rules.md` states each rule in bold (`**SWP-3**`); the prefixes of those ids are the
//! rule families. Any `FAMILY-N` written in the code, the tests, the examples, the xtask or
//! the docs must be one of them. A finer invariant with a letter suffix (`LDR-2b`) must also
//! have its own row in `INVARIANTS.md` (or be stated in `docs/rules.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::run;

/// `cargo xtask rules`: prints each id cited but not stated, and fails when there is one.
pub(crate) fn rules(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("`rules` takes no arguments, got {args:?}"));
    }
    let root = run::root();
    let read = |path: &Path| fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()));
    let rules_md = read(&root.join("docs/rules.md"))?;
    let invariants_md = read(&root.join("INVARIANTS.md"))?;

    let stated: BTreeSet<String> = rule_ids(&rules_md, None)
        .into_iter()
        .filter(|(id, at)| rules_md[..*at].ends_with("**") && rules_md[at + id.len()..].starts_with("**"))
        .map(|(id, _)| id)
        .collect();
    let families: BTreeSet<String> =
        stated.iter().filter_map(|id| id.split_once('-')).map(|(family, _)| family.to_owned()).collect();
    let invariant_rows: BTreeSet<String> = invariants_md
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|rest| rest.split(" |").next())
        .flat_map(|cell| cell.split('/').map(|id| id.trim().to_owned()))
        .collect();

    let mut files = Vec::new();
    for dir in ["crates", "tests", "examples", "xtask", "docs"] {
        collect(&root.join(dir), &mut files)?;
    }
    files.push(root.join("README.md"));
    files.push(root.join("INVARIANTS.md"));

    // Each unstated id, with the first place that cites it.
    let mut missing: BTreeMap<String, String> = BTreeMap::new();
    let mut cited = 0usize;
    for file in &files {
        let text = read(file)?;
        for (id, at) in rule_ids(&text, Some(&families)) {
            cited += 1;
            let base = id.trim_end_matches(|c: char| c.is_ascii_lowercase());
            let ok = stated.contains(base)
                && (base == id || invariant_rows.contains(&id) || rules_md.contains(&id));
            if !ok {
                let line = text[..at].matches('\n').count() + 1;
                let shown = file.strip_prefix(&root).unwrap_or(file).display().to_string();
                missing.entry(id).or_insert(format!("{shown}:{line}"));
            }
        }
    }
    for (id, place) in &missing {
        println!(
            "{id} is cited ({place}) but not stated in docs/rules.md (or, for a lettered id, INVARIANTS.md)"
        );
    }
    if missing.is_empty() {
        println!(
            "rules: {cited} citations in {} files, every id stated ({} rules)",
            files.len(),
            stated.len()
        );
        Ok(())
    } else {
        Err(format!("{} rule id(s) cited but not stated", missing.len()))
    }
}

/// Every `FAMILY-N` or `FAMILY-Nx` in `text` (FAMILY two to four capitals, in `families`
/// when given), with its byte offset.
fn rule_ids(text: &str, families: Option<&BTreeSet<String>>) -> Vec<(String, usize)> {
    let bytes = text.as_bytes();
    let mut ids = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !starts_word || !bytes[i].is_ascii_uppercase() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_uppercase() {
            j += 1;
        }
        let family_len = j - i;
        if !(2..=4).contains(&family_len) || bytes.get(j) != Some(&b'-') {
            i = j.max(i + 1);
            continue;
        }
        let mut k = j + 1;
        while k < bytes.len() && bytes[k].is_ascii_digit() {
            k += 1;
        }
        if k == j + 1 {
            i = k;
            continue;
        }
        if k < bytes.len() && bytes[k].is_ascii_lowercase() {
            k += 1;
        }
        let ends_word = k == bytes.len() || !(bytes[k].is_ascii_alphanumeric() || bytes[k] == b'_');
        if ends_word && families.is_none_or(|families| families.contains(&text[i..j])) {
            ids.push((text[i..k].to_owned(), i));
        }
        i = k;
    }
    ids
}

/// The text files (`rs`, `md`, `toml`, `sql`) below `dir`, skipping build output.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == "target") {
                continue;
            }
            collect(&path, out)?;
        } else if path.extension().is_some_and(|ext| ["rs", "md", "toml", "sql"].iter().any(|e| ext == *e)) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_whole_words_of_a_known_family() {
        let families: BTreeSet<String> = ["SWP", "LDR"].iter().map(|f| (*f).to_owned()).collect();
        let found: Vec<String> = rule_ids("SWP-3, (LDR-2b) SHA-1 xSWP-4 SWP-12c_x LDR-", Some(&families))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(found, ["SWP-3", "LDR-2b"]);
    }
}
