//! The import graph between the module files of one crate's `src/`, read from its paths
//! (`crate::`, `$crate::`, `super::`, `self::`, and a child module named from its parent), and
//! the circles in it. Shared by the shim's and the plugin's layer tests (`#[path]`-included, so
//! it needs no crate of its own): code that runs inside other people's training processes is
//! kept in one-way layers, and a circle between files is the first sign that a layer calls
//! upward by name.
//!
//! Read as text, not parsed: comments and the trailing `#[cfg(test)]` module of a file are left
//! out (a test module may use anything), declarations (`mod x;`) are not imports, and a path
//! resolves to the longest prefix that is a module file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One module file: its module path (`["nccl", "call"]`; `[]` for `lib.rs`) and its text.
struct ModuleFile {
    module: Vec<String>,
    rel: String,
    code: String,
}

/// `from -> to` with the paths that tie them, by file (paths relative to `src`).
pub type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Every `.rs` file under `src`, with its module path.
fn module_files(src: &Path) -> Vec<ModuleFile> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path: PathBuf = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let mut module: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(String::from)
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("read module file");
            out.push(ModuleFile {
                module,
                rel,
                code: code_of(&text),
            });
        }
    }
    out
}

/// The file's code without comments and without its trailing test module.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// The paths written in `code` from position `at` (after `prefix::`): `a::b::c`, and each
/// member of a `{a, b::{c, d}}` group, as segment lists.
fn paths_after(code: &str, at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let bytes = code.as_bytes();
    let mut i = at;
    let mut segs = prefix.to_vec();
    loop {
        while i < bytes.len() && (bytes[i] as char).is_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            i += 1;
            loop {
                i = paths_after(code, i, &segs, out);
                while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                    i += 1;
                }
                match bytes.get(i) {
                    Some(b',') => i += 1,
                    Some(b'}') => return i + 1,
                    _ => return i,
                }
                while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                    i += 1;
                }
                if bytes.get(i) == Some(&b'}') {
                    return i + 1;
                }
            }
        }
        let start = i;
        while i < bytes.len() && is_ident_char(bytes[i] as char) {
            i += 1;
        }
        if i > start {
            segs.push(code[start..i].to_string());
        }
        if code[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(segs);
        return i;
    }
}

/// The module a path starting in `module` (the file's own module path) names, as absolute
/// segments, or `None` when it leaves the crate (`std::`, `libc::`, ...).
fn absolute(
    module: &[String],
    children: &BTreeSet<String>,
    segs: &[String],
) -> Option<Vec<String>> {
    let first = segs.first()?;
    match first.as_str() {
        "crate" | "$crate" => Some(segs[1..].to_vec()),
        "self" => Some(module.iter().chain(&segs[1..]).cloned().collect()),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = segs;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        child if children.contains(child) => Some(module.iter().chain(segs).cloned().collect()),
        _ => None,
    }
}

/// The import graph of the crate whose sources are in `src`.
pub fn graph(src: &Path) -> Graph {
    let files = module_files(src);
    let by_module: BTreeMap<Vec<String>, &str> = files
        .iter()
        .map(|f| (f.module.clone(), f.rel.as_str()))
        .collect();
    let mut g = Graph::new();
    for f in &files {
        let children: BTreeSet<String> = by_module
            .keys()
            .filter(|m| m.len() == f.module.len() + 1 && m.starts_with(&f.module))
            .map(|m| m.last().unwrap().clone())
            .collect();
        let mut paths = Vec::new();
        let code = &f.code;
        let mut i = 0;
        while let Some(off) = code[i..].find("::") {
            let sep = i + off;
            let start = code[..sep]
                .rfind(|c: char| !is_ident_char(c))
                .map_or(0, |p| p + 1);
            let before = code[..start].trim_end();
            // A path's first segment only: not the middle of `a::b::c`, not a declaration.
            if start < sep && !before.ends_with("::") && !before.ends_with("mod") {
                let head = code[start..sep].to_string();
                i = paths_after(code, sep + 2, &[head], &mut paths);
            } else {
                i = sep + 2;
            }
        }
        for segs in paths {
            let Some(abs) = absolute(&f.module, &children, &segs) else {
                continue;
            };
            // The longest prefix that is a module file.
            let target = (0..=abs.len())
                .rev()
                .find_map(|n| by_module.get(&abs[..n]).copied());
            if let Some(to) = target {
                if to != f.rel {
                    g.entry(f.rel.clone())
                        .or_default()
                        .entry(to.to_string())
                        .or_default()
                        .insert(segs.join("::"));
                }
            }
        }
    }
    g
}

/// The circles of `g`: each strongly connected set of two or more files, as one closed walk
/// through it (`a.rs -> b.rs -> a.rs`) with the paths that tie each step.
pub fn circles(g: &Graph) -> Vec<String> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flat_map(|m| m.keys())).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for to in g.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reaches[n].contains(*n) {
            continue;
        }
        let scc: BTreeSet<&String> = nodes
            .iter()
            .copied()
            .filter(|m| reaches[n].contains(*m) && reaches[m].contains(*n))
            .collect();
        done.extend(scc.iter().map(|s| (*s).clone()));
        // One closed walk: from `n`, always step to a member of the set that still reaches `n`
        // by the shortest way (breadth-first back to `n`).
        let mut walk = vec![(*n).clone()];
        let mut cur = (*n).clone();
        loop {
            let next = shortest_step_towards(g, &scc, &cur, n);
            let why = g[&cur][&next]
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            walk.push(format!("  -> {next}   (takes {why})"));
            if &next == *n {
                break;
            }
            cur = next;
        }
        out.push(format!(
            "circle of {} files: {}\n  {}",
            scc.len(),
            scc.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            walk.join("\n  ")
        ));
    }
    out
}

/// From `cur`, the first step of a shortest walk (within `scc`) that ends at `goal`.
fn shortest_step_towards(
    g: &Graph,
    scc: &BTreeSet<&String>,
    cur: &String,
    goal: &String,
) -> String {
    let mut prev: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([cur.clone()]);
    while let Some(n) = queue.pop_front() {
        for to in g.get(&n).into_iter().flat_map(|m| m.keys()) {
            if !scc.contains(to) || prev.contains_key(to) {
                continue;
            }
            prev.insert(to.clone(), n.clone());
            if to == goal {
                let mut step = to.clone();
                while &prev[&step] != cur {
                    step = prev[&step].clone();
                }
                return step;
            }
            queue.push_back(to.clone());
        }
    }
    unreachable!("{goal} is in the same circle as {cur}")
}

/// Fails with every circle named when `src` has any.
pub fn assert_no_circles(src: &Path) {
    let g = graph(src);
    assert!(
        !g.is_empty(),
        "no imports read under {}: is this the crate's src?",
        src.display()
    );
    let found = circles(&g);
    assert!(
        found.is_empty(),
        "import circles between the module files of {} (a lower layer must not name an upper \
         one: register a function pointer instead, or move the shared piece down):\n{}",
        src.display(),
        found.join("\n")
    );
}

/// The checker itself, on a small crate with a circle: it must find it (a check that cannot
/// fail proves nothing).
pub fn self_check() {
    let dir = std::env::temp_dir().join(format!("import-graph-self-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.as_path();
    std::fs::create_dir_all(src.join("low")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod low;\npub mod top;\n").unwrap();
    std::fs::write(
        src.join("low/mod.rs"),
        "pub mod a;\npub mod b;\npub fn f() {}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("low/a.rs"),
        "use crate::low::b::{self, g};\n// crate::top::x\n",
    )
    .unwrap();
    std::fs::write(
        src.join("low/b.rs"),
        "pub fn g() { super::f(); crate::top::h() }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("top.rs"),
        "pub fn h() { crate::low::a::x(); }\n#[cfg(test)]\nmod tests { use crate::low::b; }\n",
    )
    .unwrap();
    let g = graph(src);
    assert_eq!(
        g["low/b.rs"].keys().collect::<Vec<_>>(),
        ["low/mod.rs", "top.rs"]
    );
    assert!(
        !g.contains_key("low/mod.rs"),
        "declarations and comments are not imports: {g:?}"
    );
    assert_eq!(
        g["top.rs"].keys().collect::<Vec<_>>(),
        ["low/a.rs"],
        "test modules are skipped"
    );
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("circle of 3 files: low/a.rs, low/b.rs, top.rs"),
        "{}",
        found[0]
    );
    // Broken: b no longer calls up.
    std::fs::write(src.join("low/b.rs"), "pub fn g() { super::f() }\n").unwrap();
    assert!(circles(&graph(src)).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
