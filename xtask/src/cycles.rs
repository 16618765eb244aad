//! `cargo xtask cycles`: import cycles between the modules of one crate.
//!
//! The model: every module (a file, or an inline `mod name { .. }` block) is a node; a path
//! that names another module of the same crate (`use crate::a::B`, `super::c()`,
//! `self::d::E`, or a child module named directly) is an edge from the module the path is
//! written in to the deepest module it names. A cycle is a strongly connected set of two or
//! more modules: some module imports another module that (directly or through others)
//! imports it back.
//!
//! Two things are not imports. A `mod child;` declaration is not one, and neither is a
//! `pub use` that re-exports an item of a module's own descendant: that is how a crate root
//! or a folder's `mod.rs` keeps public paths stable, and the re-exported module cannot
//! depend on it without showing up as the edge that closes a cycle.
//!
//! Comments and string literals are stripped first, so doc links do not count. The scan is
//! lexical: a macro that builds a path from pieces, or a `#[path]` attribute, is not
//! followed. It reads every `src/` directory of the workspace (each `src/bin/*.rs` is a crate
//! of its own).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::run;

/// One reference from a module to another, with where it is written.
struct Edge {
    from: String,
    to: String,
    file: PathBuf,
    line: usize,
}

/// A crate's source: its root file and the files that hold its modules, by module path.
struct CrateSource {
    name: String,
    /// Module path (`""` for the root, `"a::b"` otherwise) to the file that holds it.
    files: BTreeMap<String, PathBuf>,
}

/// `cargo xtask cycles`: prints every cycle and fails when there is one.
pub(crate) fn cycles(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("`cycles` takes no arguments, got {args:?}"));
    }
    let root = run::root();
    let mut found = 0;
    let mut crates = 0;
    for source in crate_sources(&root)? {
        crates += 1;
        for cycle in crate_cycles(&source)? {
            found += 1;
            println!("cycle in {}: {}", source.name, cycle.modules.join(" <-> "));
            for edge in cycle.edges {
                let shown = edge.file.strip_prefix(&root).unwrap_or(&edge.file);
                println!(
                    "    {} -> {}  ({}:{})",
                    show(&edge.from),
                    show(&edge.to),
                    shown.display(),
                    edge.line
                );
            }
        }
    }
    if found == 0 {
        println!("cycles: none in {crates} crates");
        Ok(())
    } else {
        Err(format!("{found} import cycle(s) between modules; cut each (see the edges above)"))
    }
}

fn show(module: &str) -> &str {
    if module.is_empty() { "crate" } else { module }
}

/// A cycle: its modules and the edges between them.
struct Cycle {
    modules: Vec<String>,
    edges: Vec<Edge>,
}

/// Every crate under `crates/*`, `tests`, `examples` and `xtask`.
fn crate_sources(root: &Path) -> Result<Vec<CrateSource>, String> {
    let mut dirs = Vec::new();
    let crates_dir = root.join("crates");
    for entry in fs::read_dir(&crates_dir).map_err(|e| format!("reading {}: {e}", crates_dir.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        dirs.push(entry.path());
    }
    for extra in ["tests", "examples", "xtask"] {
        dirs.push(root.join(extra));
    }
    dirs.sort();

    let mut sources = Vec::new();
    for dir in dirs {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let package = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let mut files = Vec::new();
        collect_rs(&src, &mut files)?;
        let has_lib = src.join("lib.rs").is_file();
        let mut library = BTreeMap::new();
        let mut binaries = Vec::new();
        for file in files {
            let relative = file.strip_prefix(&src).map_err(|e| e.to_string())?.to_path_buf();
            let parts: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            match parts.as_slice() {
                [bin, name] if bin == "bin" => {
                    binaries.push((format!("{package} (bin {name})"), file.clone()));
                }
                [bin, name, ..] if bin == "bin" => {
                    // A binary's own modules (`src/bin/name/…`): rare here, read with the binary.
                    let _ = name;
                }
                [main] if main == "main" && has_lib => {
                    binaries.push((format!("{package} (bin)"), file.clone()));
                }
                _ => {
                    library.insert(module_path(&parts), file.clone());
                }
            }
        }
        if !library.is_empty() {
            sources.push(CrateSource { name: package.clone(), files: library });
        }
        for (name, file) in binaries {
            sources.push(CrateSource { name, files: BTreeMap::from([(String::new(), file)]) });
        }
    }
    Ok(sources)
}

/// `["a", "b"]` → `"a::b"`; `lib`, `main` and `mod` name their folder's module.
fn module_path(parts: &[String]) -> String {
    let mut segments: Vec<&str> = parts.iter().map(String::as_str).collect();
    if matches!(segments.last(), Some(&("lib" | "main" | "mod"))) {
        segments.pop();
    }
    segments.join("::")
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// One token of stripped source.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The cycles of one crate.
fn crate_cycles(source: &CrateSource) -> Result<Vec<Cycle>, String> {
    let mut tokens = BTreeMap::new();
    for (module, file) in &source.files {
        let text = fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        tokens.insert(module.clone(), tokenize(&strip(&text)));
    }
    // Every module: the files, and the inline `mod name { .. }` blocks inside them.
    let mut modules: BTreeSet<String> = source.files.keys().cloned().collect();
    for (module, file_tokens) in &tokens {
        walk(module, file_tokens, &mut |event| {
            if let Walk::Inline(path) = event {
                modules.insert(path);
            }
        });
    }
    let mut edges: Vec<Edge> = Vec::new();
    for (module, file_tokens) in &tokens {
        let file = &source.files[module];
        walk(module, file_tokens, &mut |event| {
            if let Walk::Path { from, segments, reexport, line } = event
                && let Some(to) = resolve(&segments, &modules)
                && to != from
                && !(reexport && is_descendant(&to, &from))
            {
                edges.push(Edge { from, to, file: file.clone(), line });
            }
        });
    }
    Ok(strongly_connected(&modules, &edges))
}

fn is_descendant(module: &str, ancestor: &str) -> bool {
    ancestor.is_empty() && !module.is_empty() || module.starts_with(&format!("{ancestor}::"))
}

/// What [`walk`] reports.
enum Walk {
    /// An inline module, by its full path.
    Inline(String),
    /// A path written in module `from`, already made absolute (first segment `crate`).
    Path { from: String, segments: Vec<String>, reexport: bool, line: usize },
}

/// Walks a file's tokens: reports inline modules and every path that may name a module.
fn walk(file_module: &str, tokens: &[(Token, usize)], report: &mut dyn FnMut(Walk)) {
    // The inline modules open at this point, with the brace depth each one closes at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    // Inside a `pub use` statement (re-exports) until its `;`.
    let mut in_pub_use = false;
    let current = |inline: &[(String, usize)]| {
        let mut path: Vec<&str> = if file_module.is_empty() { Vec::new() } else { vec![file_module] };
        path.extend(inline.iter().map(|(name, _)| name.as_str()));
        path.join("::")
    };
    let mut i = 0;
    while i < tokens.len() {
        let (token, line) = &tokens[i];
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, at)| *at == depth) {
                    inline.pop();
                }
            }
            Token::Punct(';') => in_pub_use = false,
            Token::Ident(word) if word == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Punct('{'), _))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                    report(Walk::Inline(current(&inline)));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" => {
                in_pub_use = is_pub_before(tokens, i);
            }
            Token::Ident(_) => {
                let after_sep = i > 0 && matches!(tokens[i - 1].0, Token::PathSep);
                let macro_crate = i > 0 && tokens[i - 1].0 == Token::Punct('$');
                if !after_sep && !macro_crate && matches!(tokens.get(i + 1), Some((Token::PathSep, _))) {
                    let here = current(&inline);
                    let (trees, next) = parse_tree(tokens, i);
                    for tree in trees {
                        // `crate::…` is absolute; `super::…`, `self::…` and a child module
                        // named directly (`child::item`) start from this module. Any other
                        // first segment (`std::…`, `Self::…`) resolves back to this module
                        // and is dropped by the caller.
                        let absolute = if tree.first().is_some_and(|first| first == "crate") {
                            tree
                        } else {
                            std::iter::once("crate".to_owned())
                                .chain(here.split("::").filter(|s| !s.is_empty()).map(str::to_owned))
                                .chain(tree)
                                .collect()
                        };
                        report(Walk::Path {
                            from: here.clone(),
                            segments: absolute,
                            reexport: in_pub_use,
                            line: *line,
                        });
                    }
                    i = next;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// Whether the `use` at `index` is preceded by a visibility (`pub`, `pub(crate)`, …).
fn is_pub_before(tokens: &[(Token, usize)], index: usize) -> bool {
    let mut j = index;
    // Skip a `(crate)` / `(super)` / `(in path)` restriction.
    if j > 0 && tokens[j - 1].0 == Token::Punct(')') {
        while j > 0 && tokens[j - 1].0 != Token::Punct('(') {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j > 0 && matches!(&tokens[j - 1].0, Token::Ident(word) if word == "pub")
}

/// Parses a use tree (or a plain path) starting at `start`; returns every leaf path and the
/// index after the tree.
fn parse_tree(tokens: &[(Token, usize)], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = start;
    loop {
        match tokens.get(i).map(|(token, _)| token) {
            Some(Token::Ident(word)) => {
                prefix.push(word.clone());
                i += 1;
            }
            Some(Token::Punct('{')) => {
                // A group: each member is a tree of its own under the prefix.
                let mut leaves = Vec::new();
                i += 1;
                loop {
                    match tokens.get(i).map(|(token, _)| token) {
                        None => return (leaves, i),
                        Some(Token::Punct('}')) => return (leaves, i + 1),
                        Some(Token::Punct(',')) => i += 1,
                        Some(Token::Ident(_) | Token::Punct('{')) => {
                            let (inner, next) = parse_tree(tokens, i);
                            for leaf in inner {
                                let mut full = prefix.clone();
                                full.extend(leaf);
                                leaves.push(full);
                            }
                            // `as name` after a member.
                            i = skip_rename(tokens, next);
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            _ => return (vec![prefix], i),
        }
        if matches!(tokens.get(i), Some((Token::PathSep, _))) {
            i += 1;
        } else {
            return (vec![prefix], i);
        }
    }
}

fn skip_rename(tokens: &[(Token, usize)], i: usize) -> usize {
    match (tokens.get(i), tokens.get(i + 1)) {
        (Some((Token::Ident(word), _)), Some((Token::Ident(_), _))) if word == "as" => i + 2,
        _ => i,
    }
}

/// The deepest known module an absolute path (`crate::…`) names, if any.
fn resolve(segments: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut path: Vec<&str> = Vec::new();
    for (index, segment) in segments.iter().enumerate() {
        match segment.as_str() {
            "crate" if index == 0 => path.clear(),
            "super" => {
                path.pop()?;
            }
            "self" => {}
            other => path.push(other),
        }
    }
    // The deepest prefix that is a module. A path that leaves the crate (its first segment
    // is no module: `std::…`, a dependency) names nothing here.
    let mut best = None;
    for len in 0..=path.len() {
        let candidate = path[..len].join("::");
        if modules.contains(&candidate) {
            best = Some(candidate);
        } else if len > 0 {
            break;
        }
    }
    best
}

/// Cycles: the strongly connected sets of two or more modules (Tarjan), with their edges.
fn strongly_connected(modules: &BTreeSet<String>, edges: &[Edge]) -> Vec<Cycle> {
    let names: Vec<&String> = modules.iter().collect();
    let index_of: BTreeMap<&str, usize> =
        names.iter().enumerate().map(|(i, name)| (name.as_str(), i)).collect();
    let mut adjacency: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); names.len()];
    for edge in edges {
        adjacency[index_of[edge.from.as_str()]].insert(index_of[edge.to.as_str()]);
    }

    struct State {
        next: usize,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        components: Vec<Vec<usize>>,
    }
    fn visit(node: usize, adjacency: &[BTreeSet<usize>], state: &mut State) {
        state.index[node] = Some(state.next);
        state.low[node] = state.next;
        state.next += 1;
        state.stack.push(node);
        state.on_stack[node] = true;
        for &next in &adjacency[node] {
            match state.index[next] {
                None => {
                    visit(next, adjacency, state);
                    state.low[node] = state.low[node].min(state.low[next]);
                }
                Some(index) if state.on_stack[next] => state.low[node] = state.low[node].min(index),
                Some(_) => {}
            }
        }
        if Some(state.low[node]) == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack[top] = false;
                component.push(top);
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                state.components.push(component);
            }
        }
    }
    let mut state = State {
        next: 0,
        index: vec![None; names.len()],
        low: vec![0; names.len()],
        on_stack: vec![false; names.len()],
        stack: Vec::new(),
        components: Vec::new(),
    };
    for node in 0..names.len() {
        if state.index[node].is_none() {
            visit(node, &adjacency, &mut state);
        }
    }

    let mut cycles = Vec::new();
    for component in state.components {
        let members: BTreeSet<&str> = component.iter().map(|&i| names[i].as_str()).collect();
        let mut seen = BTreeSet::new();
        let mut cycle_edges = Vec::new();
        for edge in edges {
            if members.contains(edge.from.as_str())
                && members.contains(edge.to.as_str())
                && seen.insert((edge.from.clone(), edge.to.clone()))
            {
                cycle_edges.push(Edge {
                    from: edge.from.clone(),
                    to: edge.to.clone(),
                    file: edge.file.clone(),
                    line: edge.line,
                });
            }
        }
        cycles.push(Cycle {
            modules: members.iter().map(|m| show(m).to_owned()).collect(),
            edges: cycle_edges,
        });
    }
    cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
    cycles
}

/// The source with comments, string and character literals blanked (newlines kept).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nesting = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    nesting += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < chars.len() {
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                out.push(blank(chars[j]));
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&skipped) = chars.get(i) {
                    out.push(blank(skipped));
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Identifiers, `::` and single punctuation, each with its line.
fn tokenize(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `r#ident` raw identifiers.
            tokens.push((Token::Ident(word), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push((Token::PathSep, line));
            i += 2;
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
        } else {
            tokens.push((Token::Punct(c), line));
            i += 1;
        }
    }
    tokens
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // A failed unwrap is a failed test.
mod tests {
    use super::*;

    fn edges_of(files: &[(&str, &str)]) -> Vec<(String, String)> {
        let modules: BTreeSet<String> = files.iter().map(|(m, _)| (*m).to_owned()).collect();
        let mut edges = Vec::new();
        for (module, text) in files {
            walk(module, &tokenize(&strip(text)), &mut |event| {
                if let Walk::Path { from, segments, reexport, .. } = event
                    && let Some(to) = resolve(&segments, &modules)
                    && to != from
                    && !(reexport && is_descendant(&to, &from))
                {
                    edges.push((from, to));
                }
            });
        }
        edges.sort();
        edges.dedup();
        edges
    }

    #[test]
    fn use_trees_super_and_child_paths_are_edges() {
        let edges = edges_of(&[
            ("", "mod a; mod b; pub use crate::a::A; fn f() { b::g(); }"),
            ("a", "use crate::{b::{self, B}, c as d};\nuse super::c::C;"),
            ("b", "fn g() {}"),
            ("c", "// use crate::a;\nconst S: &str = \"crate::a::X\";"),
        ]);
        let pairs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(pairs, [("", "b"), ("a", "b"), ("a", "c")]);
    }

    #[test]
    fn a_module_that_imports_its_importer_is_a_cycle() {
        let modules: BTreeSet<String> = ["", "a", "b", "c"].iter().map(|m| (*m).to_owned()).collect();
        let edge =
            |from: &str, to: &str| Edge { from: from.into(), to: to.into(), file: PathBuf::new(), line: 1 };
        let cycles =
            strongly_connected(&modules, &[edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("", "a")]);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].modules, ["a", "b", "c"]);
        assert!(strongly_connected(&modules, &[edge("a", "b"), edge("", "a")]).is_empty());
    }

    #[test]
    fn a_test_module_using_its_parent_is_not_a_cycle() {
        let edges =
            edges_of(&[("a", "use crate::b::B; #[cfg(test)] mod tests { use super::*; }"), ("b", "")]);
        let pairs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(pairs, [("a", "b"), ("a::tests", "a")]);
    }
}
