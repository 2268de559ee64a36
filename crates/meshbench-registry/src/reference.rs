//! Image references as `docker push` reads them: `[registry/]repository[:tag]`, the registry
//! named where the first component has a `.` or a `:` or is `localhost`, Docker Hub otherwise
//! (with `library/` before a one-component name). Pushing needs a tag; a digest is refused.

use crate::Error;

/// Docker Hub as references name it, and where its registry API answers.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// The distribution spec's limit on a tag.
const MAX_TAG: usize = 128;
/// The distribution spec's limit on a repository name, registry included.
const MAX_NAME: usize = 255;

/// A parsed image reference to push to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The registry's host, with its port where given (`registry.example:5000`).
    pub registry: String,
    /// The repository in it (`team/meshbench`).
    pub repository: String,
    pub tag: String,
}

impl ImageRef {
    /// Parses `text`; a reference without a tag gets `latest`, as `docker push` gives it.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::BadReference {
            reference: text.to_owned(),
            why: why.to_owned(),
        };
        if text.contains('@') {
            return Err(bad("a digest names what a registry has; push by tag"));
        }
        if text.len() > MAX_NAME + 1 + MAX_TAG {
            return Err(bad("too long"));
        }
        let (registry, rest) = match text.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_owned(), rest)
            }
            _ => (DOCKER_HUB.to_owned(), text),
        };
        if !registry_is_valid(&registry) {
            return Err(bad(
                "the registry is not a host name or address with an optional port",
            ));
        }
        // The tag follows the last `:` that comes after the last `/`.
        let last_component = rest.rsplit('/').next().unwrap_or(rest);
        let (repository, tag) = match last_component.rsplit_once(':') {
            Some((_, tag)) => (&rest[..rest.len() - tag.len() - 1], tag),
            None => (rest, "latest"),
        };
        if !tag_is_valid(tag) {
            return Err(bad(
                "the tag is not 1-128 letters, digits, `_`, `.` or `-` (not starting with `.` \
                 or `-`)",
            ));
        }
        if repository.is_empty() || !repository.split('/').all(component_is_valid) {
            return Err(bad(
                "the repository is not lowercase letters and digits separated by `/`, `.`, `_`, \
                 `__` or `-`",
            ));
        }
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository.to_owned()
        };
        if registry.len() + 1 + repository.len() > MAX_NAME {
            return Err(bad("the name is longer than 255 characters"));
        }
        Ok(ImageRef {
            registry,
            repository,
            tag: tag.to_owned(),
        })
    }

    /// Where the registry's API answers (Docker Hub's is not `docker.io`).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}:{}", self.registry, self.repository, self.tag)
    }
}

/// A host name or IPv4 address, or `[IPv6]`, with an optional numeric port.
fn registry_is_valid(registry: &str) -> bool {
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, tail)) if v6.parse::<std::net::Ipv6Addr>().is_ok() => {
                (v6, tail.strip_prefix(':'))
            }
            _ => return false,
        }
    } else {
        match registry.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        }
    };
    let host_ok = registry.starts_with('[')
        || (!host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            }));
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    host_ok && port_ok
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn component_is_valid(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn tag_is_valid(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    !tag.is_empty()
        && tag.len() <= MAX_TAG
        && tag.as_bytes().first().copied().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn references_name_their_registry_repository_and_tag_as_docker_reads_them() {
        for (text, registry, repository, tag) in [
            ("meshbench", "docker.io", "library/meshbench", "latest"),
            (
                "team/meshbench:0.1.0",
                "docker.io",
                "team/meshbench",
                "0.1.0",
            ),
            (
                "127.0.0.1:5000/meshbench:under-test",
                "127.0.0.1:5000",
                "meshbench",
                "under-test",
            ),
            ("localhost/a/b-c__d.e:v1", "localhost", "a/b-c__d.e", "v1"),
            (
                "ghcr.io/org/meshbench",
                "ghcr.io",
                "org/meshbench",
                "latest",
            ),
            ("[::1]:5000/meshbench:1", "[::1]:5000", "meshbench", "1"),
        ] {
            let parsed = ImageRef::parse(text).unwrap();
            assert_eq!(
                (
                    parsed.registry.as_str(),
                    parsed.repository.as_str(),
                    parsed.tag.as_str()
                ),
                (registry, repository, tag),
                "{text}"
            );
        }
        assert_eq!(
            ImageRef::parse("meshbench").unwrap().api_host(),
            "registry-1.docker.io"
        );
        assert_eq!(
            ImageRef::parse("reg.example:443/x:y").unwrap().to_string(),
            "reg.example:443/x:y"
        );
    }

    #[test]
    fn malformed_references_are_refused_with_the_reason() {
        for bad in [
            "",
            "Meshbench",
            "meshbench:",
            "meshbench:-x",
            "meshbench@sha256:abc",
            "reg.example:99999/x",
            "reg.example:port/x",
            "reg..example/x",
            "x//y",
            "x/",
            "a___b",
            "-a",
            "a.",
            "reg.example/",
        ] {
            let e = ImageRef::parse(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    proptest! {
        #[test]
        fn parsing_anything_never_panics(text in ".{0,300}") {
            let _ = ImageRef::parse(&text);
        }

        #[test]
        fn a_valid_reference_prints_as_it_parses(
            registry in "[a-z]([a-z0-9-]{0,8}[a-z0-9])?\\.[a-z]{2,5}(:[0-9]{1,4})?",
            repository in "[a-z0-9]{1,8}([._-][a-z0-9]{1,8}){0,2}(/[a-z0-9]{1,8}){0,2}",
            tag in "[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}",
        ) {
            let text = format!("{registry}/{repository}:{tag}");
            let parsed = ImageRef::parse(&text).unwrap();
            prop_assert_eq!(parsed.to_string(), text);
        }
    }
}
