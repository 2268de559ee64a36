//! The studies' published pages (`docs/results/E*.md`): each is exactly what its own command
//! makes from the results kept beside it, so a page can never drift from its data; keeping a
//! kept file again gives the same bytes; bad input to `publish` is named, exit code 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use meshbench_testkit::assert_success;

fn meshbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_meshbench"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/results"))
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .filter(|p| p.file_name().is_some_and(|n| n != "README.md"))
                .collect()
        })
        .unwrap_or_default();
    pages.sort();
    pages
}

/// The command a page says made it, split into its arguments after `meshbench`.
fn page_command(page: &str) -> Vec<String> {
    let line = page
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("meshbench publish page "))
        .expect("a published page names the command that made it");
    line.split_whitespace().skip(1).map(str::to_owned).collect()
}

#[test]
fn every_published_page_is_what_its_command_makes_from_the_kept_results() {
    let pages = pages();
    assert!(!pages.is_empty(), "docs/results has no study page to check");
    let scratch = tempfile::tempdir().unwrap();
    for page in pages {
        let committed = std::fs::read_to_string(&page).unwrap();
        let args = page_command(&committed);
        let out_at = args.iter().position(|a| a == "--out").unwrap() + 1;
        let name = page.file_name().unwrap();
        let fresh = scratch.path().join(name);
        let mut rerun = args.clone();
        rerun[out_at] = fresh.display().to_string();
        let output = meshbench()
            .current_dir(repo())
            .args(&rerun)
            .output()
            .unwrap();
        assert_success(&output);
        let made = std::fs::read_to_string(&fresh)
            .unwrap()
            .replace(&fresh.display().to_string(), &args[out_at]);
        assert!(
            made == committed,
            "{} is not what `meshbench {}` makes from its kept results: regenerate it",
            page.display(),
            args.join(" ")
        );
        // Every chart the page links is there.
        let dir = page.with_extension("");
        for link in committed
            .lines()
            .filter_map(|l| l.strip_prefix("!["))
            .filter_map(|l| l.split("](").nth(1))
            .map(|l| l.trim_end_matches(')'))
        {
            let chart = page.parent().unwrap().join(link);
            assert!(
                chart.is_file(),
                "{} links {link}, which is missing",
                page.display()
            );
            assert!(
                chart.starts_with(&dir),
                "{link} is outside {}",
                dir.display()
            );
        }
    }
}

#[test]
fn keeping_a_kept_file_again_gives_the_same_bytes() {
    let kept: Vec<PathBuf> = pages()
        .iter()
        .flat_map(|p| page_command(&std::fs::read_to_string(p).unwrap()))
        .filter(|a| a.ends_with(".json.gz"))
        .map(|a| repo().join(a))
        .collect();
    let Some(first) = kept.first() else {
        panic!("no page keeps any results");
    };
    let scratch = tempfile::tempdir().unwrap();
    let again = scratch.path().join("again.json.gz");
    let output = meshbench()
        .args(["publish", "keep"])
        .arg(first)
        .arg(&again)
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(
        std::fs::read(first).unwrap(),
        std::fs::read(&again).unwrap(),
        "keeping {} again changed it",
        first.display()
    );
}

#[test]
fn bad_input_to_publish_is_named_and_exits_with_code_2() {
    let scratch = tempfile::tempdir().unwrap();
    let not_ours = scratch.path().join("other.json");
    std::fs::write(&not_ours, r#"{"kind": "something.else"}"#).unwrap();
    let garbage = scratch.path().join("garbage.json.gz");
    std::fs::write(&garbage, [0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad]).unwrap();
    let out = scratch.path().join("E1.md");
    let out = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "publish",
                "page",
                "E9",
                "--out",
                out,
                not_ours.to_str().unwrap(),
            ],
            "kept: ",
        ),
        (
            vec![
                "publish",
                "page",
                "E1",
                "--out",
                out,
                not_ours.to_str().unwrap(),
            ],
            "kind \"something.else\" is neither a run",
        ),
        (
            vec![
                "publish",
                "page",
                "E1",
                "--out",
                out,
                garbage.to_str().unwrap(),
            ],
            "kept: ",
        ),
        (
            vec![
                "publish",
                "page",
                "E1",
                "--out",
                "page.html",
                not_ours.to_str().unwrap(),
            ],
            "out: page.html is not a .md page",
        ),
        (
            vec!["publish", "keep", scratch.path().to_str().unwrap(), out],
            "has neither results.json nor verify.json",
        ),
    ];
    for (args, needle) in cases {
        let output = meshbench().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: expected {needle:?} in {stderr}"
        );
    }
    assert!(!Path::new(out).exists(), "a refused command wrote {out}");
}
