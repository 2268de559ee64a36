//! The workspace's structural rules, checked on its sources: no two modules of a crate use
//! each other (directly or through others), and the crates that must stay apart do.
//!
//! A module is a source file (`lib.rs`, `foo.rs`, `foo/mod.rs`, `foo/bar.rs`). A module uses
//! another when one of its `use` declarations or paths names an item through `crate::`,
//! `super::`, `self::` or a child module's name. Two things are not uses: a parent's `mod`
//! declarations and its `pub use` re-exports (the facade a parent shows for its children), and
//! test code (everything from a file's `#[cfg(test)]` module on), which may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Module path (segments under the crate root) of every source file of a crate.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let mut segments: Vec<String> = relative
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                segments.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                segments.pop();
            }
            // Binaries under src/bin are crates of their own.
            if segments.first().map(String::as_str) == Some("bin") {
                continue;
            }
            found.insert(segments, path);
        }
    }
    found
}

/// The code of a file without comments, the contents of its string and character literals,
/// and its test module.
fn production_code(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                break;
            }
        }
        kept.push_str(line);
        kept.push('\n');
    }
    let chars: Vec<char> = kept.chars().collect();
    let mut code = String::with_capacity(kept.len());
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && !ident_before(&chars, at)
        {
            // A raw string: r"...", r#"..."#.
            let mut hashes = 0;
            let mut probe = at + 1;
            while chars.get(probe) == Some(&'#') {
                hashes += 1;
                probe += 1;
            }
            if chars.get(probe) != Some(&'"') {
                code.push(c);
                at += 1;
                continue;
            }
            at = probe + 1;
            while at < chars.len() {
                if chars[at] == '"' && (1..=hashes).all(|h| chars.get(at + h) == Some(&'#')) {
                    at += 1 + hashes;
                    break;
                }
                at += 1;
            }
            code.push_str("\"\"");
        } else if c == '"' {
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            code.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let close = if next == Some('\\') {
                (at + 2..chars.len().min(at + 12)).find(|&i| chars[i] == '\'')
            } else {
                (chars.get(at + 2) == Some(&'\'')).then_some(at + 2)
            };
            match close {
                Some(end) => {
                    code.push_str("' '");
                    at = end + 1;
                }
                None => {
                    code.push(c);
                    at += 1;
                }
            }
        } else {
            code.push(c);
            at += 1;
        }
    }
    code
}

fn ident_before(chars: &[char], at: usize) -> bool {
    at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_')
}

/// Expands a use tree such as `crate::{a::{b, c}, d}` into its paths.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        if tree.contains('}') {
            return Vec::new();
        }
        return vec![tree.split(" as ").next().unwrap_or(&tree).to_string()];
    };
    let prefix = &tree[..open];
    let Some(close) = tree.rfind('}').filter(|&close| close > open) else {
        return Vec::new();
    };
    let inner = &tree[open + 1..close];
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use_tree(&format!("{prefix}{p}")))
        .collect()
}

/// Every path the code names, as written: from `use` declarations (but not `pub use`
/// re-exports) and from paths in expressions and types.
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    // Use declarations, which may span lines.
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let starts_statement = before
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}');
        let end = rest[at..].find(';').map(|e| at + e).unwrap_or(rest.len());
        if starts_statement {
            let line_start = before.rfind('\n').map(|n| n + 1).unwrap_or(0);
            let visibility = before[line_start..].trim();
            if !visibility.starts_with("pub") {
                paths.extend(expand_use_tree(&rest[at + 4..end]));
            }
        }
        rest = &rest[(end + 1).min(rest.len())..];
    }
    // Paths in code: every run of identifiers joined by `::`.
    let bytes: Vec<char> = code.chars().collect();
    let mut at = 0;
    while at < bytes.len() {
        let c = bytes[at];
        if c.is_alphabetic() || c == '_' {
            let start = at;
            while at < bytes.len()
                && (bytes[at].is_alphanumeric()
                    || bytes[at] == '_'
                    || (bytes[at] == ':' && bytes.get(at + 1) == Some(&':')))
            {
                at += if bytes[at] == ':' { 2 } else { 1 };
            }
            let preceded_by_colons =
                start >= 2 && bytes[start - 1] == ':' && bytes[start - 2] == ':';
            let path: String = bytes[start..at].iter().collect();
            if path.contains("::") && !preceded_by_colons {
                paths.push(path.trim_end_matches("::").to_string());
            }
        } else {
            at += 1;
        }
    }
    paths
}

/// A crate's modules and what each re-exports (`pub use`), so that a use of `crate::Item`
/// counts as a use of the module that defines it, not of the facade that re-exports it.
struct Crate {
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// (module, re-exported name) -> the path its `pub use` names.
    reexports: BTreeMap<(Vec<String>, String), String>,
}

impl Crate {
    fn read(src: &Path) -> Self {
        let modules = modules(src);
        let mut reexports = BTreeMap::new();
        for (module, file) in &modules {
            let text = std::fs::read_to_string(file).expect("read a source file");
            for path in reexported_paths(&production_code(&text)) {
                let Some((_, last)) = path.rsplit_once("::") else {
                    continue;
                };
                let name = last.rsplit(" as ").next().unwrap_or(last);
                if name != "*" && name != "self" {
                    reexports.insert((module.clone(), name.to_string()), path);
                }
            }
        }
        Crate { modules, reexports }
    }

    fn children(&self, module: &[String]) -> BTreeSet<String> {
        self.modules
            .keys()
            .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
            .map(|other| other[module.len()].clone())
            .collect()
    }

    /// The module a path names an item of, if it is a module of this crate other than
    /// `from`; through re-exports, at most a few deep.
    fn resolve(&self, from: &[String], path: &str, depth: u32) -> Option<Vec<String>> {
        let segments: Vec<&str> = path.split("::").collect();
        let mut base: Vec<String>;
        let mut rest: &[&str] = &segments;
        match segments.first().copied() {
            Some("crate") => {
                base = Vec::new();
                rest = &segments[1..];
            }
            Some("self") => {
                base = from.to_vec();
                rest = &segments[1..];
            }
            Some("super") => {
                base = from.to_vec();
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            Some(first) if self.children(from).contains(first) => base = from.to_vec(),
            _ => return None,
        }
        while let Some(segment) = rest.first() {
            let mut deeper = base.clone();
            deeper.push(segment.to_string());
            if self.modules.contains_key(&deeper) {
                base = deeper;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        if let (Some(item), true) = (rest.first(), depth < 4) {
            if let Some(target) = self.reexports.get(&(base.clone(), item.to_string())) {
                if let Some(defined) = self.resolve(&base, target, depth + 1) {
                    return (defined.as_slice() != from).then_some(defined);
                }
            }
        }
        (base.as_slice() != from && self.modules.contains_key(&base)).then_some(base)
    }
}

/// The paths a module's `pub use` declarations name.
fn reexported_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("pub use ") {
        let rest = &code[at + "pub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        paths.extend(expand_use_tree(&rest[..end]));
    }
    paths
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let next = walk.index.len();
        walk.index.insert(node, next);
        walk.low.insert(node, next);
        walk.stack.push(node);
        walk.on_stack.insert(node);
        for target in walk.edges.get(node).into_iter().flatten() {
            let target = target.as_str();
            if !walk.index.contains_key(target) {
                visit(walk, target);
                let low = walk.low[node].min(walk.low[target]);
                walk.low.insert(node, low);
            } else if walk.on_stack.contains(target) {
                let low = walk.low[node].min(walk.index[target]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut component = Vec::new();
            while let Some(top) = walk.stack.pop() {
                walk.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// A use between two modules, seen where their subtrees meet: `a::x` using `b::y` is `a`
/// using `b`, so that a cycle between two subtrees shows whichever files make it. A module and
/// its own ancestors are one subtree (a parent is its children's facade), so their uses of
/// each other are not edges.
fn lift(from: &[String], to: &[String]) -> Option<(Vec<String>, Vec<String>)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].to_vec(), to[..=common].to_vec()))
}

/// The lifted uses of one crate (`lift`), each with the file-module uses that make it.
type Uses = BTreeMap<(String, String), BTreeSet<String>>;

fn crate_uses(src: &Path) -> Uses {
    let krate = Crate::read(src);
    let mut uses = Uses::new();
    for (module, file) in &krate.modules {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let code = production_code(&text);
        for path in named_paths(&code) {
            let Some(target) = krate.resolve(module, &path, 0) else {
                continue;
            };
            if let Some((from, to)) = lift(module, &target) {
                uses.entry((display(&from), display(&to)))
                    .or_default()
                    .insert(format!("{} uses {}", display(module), display(&target)));
            }
        }
    }
    uses
}

/// The module graph of one crate: module -> the modules it uses.
fn module_graph(uses: &Uses) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in uses.keys() {
        edges.entry(from.clone()).or_default().insert(to.clone());
        edges.entry(to.clone()).or_default();
    }
    edges
}

fn crates() -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(workspace().join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), p))
        .collect();
    found.sort();
    found
}

#[test]
fn no_two_modules_of_a_crate_use_each_other() {
    let mut report = Vec::new();
    for (name, dir) in crates() {
        let uses = crate_uses(&dir.join("src"));
        let graph = module_graph(&uses);
        for component in cycles(&graph) {
            let mut detail = Vec::new();
            for from in &component {
                for to in graph[from].iter().filter(|to| component.contains(to)) {
                    let files = &uses[&(from.clone(), to.clone())];
                    let files: Vec<&str> = files.iter().map(String::as_str).collect();
                    detail.push(format!("{from} -> {to} ({})", files.join("; ")));
                }
            }
            report.push(format!("{name}: {}", detail.join(",\n    ")));
        }
    }
    assert!(
        report.is_empty(),
        "module cycles (move the shared type to a leaf module):\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    std::fs::create_dir(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use a::Thing;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "mod inner;\nuse crate::b::Other;\n").unwrap();
    std::fs::write(src.join("a/inner.rs"), "pub struct Thing;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "use crate::{a::{inner::Thing}, c};\n// crate::nothing::here\n\
         #[cfg(test)]\nmod tests { use crate::lib_only; }\n",
    )
    .unwrap();
    let uses = crate_uses(src);
    let graph = module_graph(&uses);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(
        graph["b"],
        BTreeSet::from(["a".to_string()]),
        "b uses a::inner, which is in a's subtree; c is no module but an item of the crate \
         root, which is b's ancestor"
    );
    assert_eq!(cycles(&graph), vec![vec!["a".to_string(), "b".to_string()]]);

    std::fs::write(src.join("a/mod.rs"), "mod inner;\nfn f() { inner::g() }\n").unwrap();
    std::fs::write(
        src.join("a/inner.rs"),
        "pub fn g() { super::super::b::g() }\n",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "pub fn g() {}\n").unwrap();
    let uses = crate_uses(src);
    assert!(
        cycles(&module_graph(&uses)).is_empty(),
        "a uses its own child"
    );
    assert_eq!(
        uses[&("a".to_string(), "b".to_string())],
        BTreeSet::from(["a::inner uses b".to_string()])
    );
}

/// A mesh is its own module (`meshbench-meshes/src/<mesh>/`, registered in `registry.rs`):
/// what several meshes share is a building block in a module of its own, never another mesh.
#[test]
fn no_mesh_module_uses_another() {
    let src = workspace().join("crates/meshbench-meshes/src");
    let registry = std::fs::read_to_string(src.join("registry.rs")).expect("read registry.rs");
    let meshes: BTreeSet<String> = registry
        .split("crate::")
        .skip(1)
        .filter_map(|rest| rest.split_once("::SCENARIOS").map(|(m, _)| m.to_string()))
        .filter(|m| m.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect();
    assert!(
        meshes.len() >= 10,
        "the registry lists the meshes: {meshes:?}"
    );
    let crossing: Vec<String> = crate_uses(&src)
        .into_iter()
        .filter(|((from, to), _)| meshes.contains(from) && meshes.contains(to))
        .flat_map(|(_, files)| files)
        .collect();
    assert!(
        crossing.is_empty(),
        "mesh modules using other meshes (move what they share to a building block):\n  {}",
        crossing.join("\n  ")
    );
}

/// The crates that must not depend on each other, as the architecture's seams say.
#[test]
fn the_seams_between_crates_hold() {
    // The runner's crate knows only the platform seam; each platform is a crate of its own,
    // and neither knows the other's internals.
    let forbidden = [
        ("meshbench-experiment", "meshbench-lab"),
        ("meshbench-experiment", "meshbench-netlab"),
        ("meshbench-experiment", "meshbench-local"),
        ("meshbench-experiment", "meshbench-kube"),
        ("meshbench-kube", "meshbench-lab"),
        ("meshbench-kube", "meshbench-local"),
        ("meshbench-local", "meshbench-kube"),
    ];
    let mut broken = Vec::new();
    for (from, to) in forbidden {
        let manifest =
            std::fs::read_to_string(workspace().join("crates").join(from).join("Cargo.toml"))
                .expect("read a crate manifest");
        let dependencies = manifest.split("[dev-dependencies]").next().unwrap_or("");
        if dependencies.lines().any(|l| {
            l.trim_start().starts_with(&format!("{to}."))
                || l.trim_start().starts_with(&format!("{to} "))
        }) {
            broken.push(format!("{from} depends on {to}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The Kubernetes backend is a cargo feature: every crate that uses it takes meshbench-kube
/// as an optional dependency, so the default build (the README's first command) leaves the
/// Kubernetes client and its API types out.
#[test]
fn the_kubernetes_backend_is_an_optional_dependency() {
    let mut required = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates")).expect("list the crates") {
        let dir = entry.expect("a crate directory").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let dependencies = manifest.split("[dev-dependencies]").next().unwrap_or("");
        let unconditional = dependencies.lines().any(|l| {
            let l = l.trim_start();
            (l.starts_with("meshbench-kube.") || l.starts_with("meshbench-kube "))
                && !l.contains("optional = true")
        });
        if unconditional {
            required.push(dir.display().to_string());
        }
    }
    assert!(
        required.is_empty(),
        "crates that always build the Kubernetes backend (make meshbench-kube optional, \
         behind their `kubernetes` feature):\n  {}",
        required.join("\n  ")
    );
}

/// The binary's crate is optimised lightly in `release` (it is the CLI), and Rust compiles a
/// generic in the crate that uses it. So the binary's crate starts the workloads' servers
/// only through `BoundServer::serve_app`, which keeps each role's server in
/// meshbench-workload, and never names what would instantiate one here. (The check behind
/// it, on symbols: docs/benchmarks.md, "Where the data path compiles".)
#[test]
fn the_binary_crate_instantiates_no_workload_server() {
    let src = workspace().join("crates/meshbench/src");
    let generic_entries = ["RoleService", "grpc_echo_service", "accept_loop"];
    let mut named = Vec::new();
    for (module, file) in modules(&src) {
        let code = production_code(&std::fs::read_to_string(&file).expect("read a source file"));
        for entry in generic_entries {
            if code.contains(entry) {
                named.push(format!("{} names {entry}", display(&module)));
            }
        }
    }
    assert!(
        named.is_empty(),
        "serve workloads through BoundServer::serve_app instead:\n  {}",
        named.join("\n  ")
    );
}
