//! The distribution API's push, as `docker push` and `crane` speak it: each blob the
//! registry lacks (`HEAD`, then a monolithic upload: `POST` a session, `PUT` the bytes with
//! their digest), then the manifest under the tag. Authentication follows the registry's
//! challenge: `Basic` with the credentials, or `Bearer` with a token from the realm it names
//! (asked with the credentials, where there are any, for `pull,push` on the repository).
//! HTTPS by default, with this machine's trusted roots and any CA given; plain HTTP only when
//! asked, and then no credentials go to a token realm over plain HTTP either.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::credentials::Credentials;
use crate::layout::{Blob, Image};
use crate::reference::ImageRef;
use crate::Error;

/// How long a request other than a blob's upload may take, from connect to the whole answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one blob's upload may take.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a registry's or token service's answer that is read.
pub const MAX_ANSWER: usize = 64 << 10;

/// How to reach the registry.
#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// Plain HTTP instead of HTTPS (a registry on loopback or a lab network).
    pub plain_http: bool,
    /// PEM certificates to trust besides this machine's roots (a registry with a private CA).
    pub ca_certs: Option<PathBuf>,
    pub credentials: Option<Credentials>,
}

/// What a push did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest: `<registry>/<repository>@<digest>` names exactly this image.
    pub digest: String,
    /// Blobs uploaded, and their bytes.
    pub uploaded: usize,
    pub uploaded_bytes: u64,
    /// Blobs the registry had already.
    pub present: usize,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Pushes `image` to `reference`.
pub async fn push(
    image: &Image,
    reference: &ImageRef,
    options: &PushOptions,
) -> Result<Pushed, Error> {
    let mut registry = Registry::new(reference, options)?;
    let (mut uploaded, mut uploaded_bytes, mut present) = (0, 0, 0);
    for blob in &image.blobs {
        if registry.has_blob(&blob.digest).await? {
            present += 1;
        } else {
            registry.upload(blob).await?;
            uploaded += 1;
            uploaded_bytes += blob.bytes.len() as u64;
        }
    }
    let digest = registry.put_manifest(&image.manifest).await?;
    Ok(Pushed {
        digest,
        uploaded,
        uploaded_bytes,
        present,
    })
}

struct Registry {
    client: HttpClient,
    /// `https://host[:port]` (or `http://`).
    base: String,
    repository: String,
    tag: String,
    plain_http: bool,
    credentials: Option<Credentials>,
    /// The `Authorization` header the registry's last challenge asked for.
    authorization: Option<String>,
}

impl Registry {
    fn new(reference: &ImageRef, options: &PushOptions) -> Result<Self, Error> {
        let scheme = if options.plain_http { "http" } else { "https" };
        Ok(Registry {
            client: http_client(options.ca_certs.as_deref())?,
            base: format!("{scheme}://{}", reference.api_host()),
            repository: reference.repository.clone(),
            tag: reference.tag.clone(),
            plain_http: options.plain_http,
            credentials: options.credentials.clone(),
            authorization: None,
        })
    }

    async fn has_blob(&mut self, digest: &str) -> Result<bool, Error> {
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, self.repository);
        let answer = self
            .send(Method::HEAD, &url, vec![], Bytes::new(), REQUEST_TIMEOUT)
            .await?;
        match answer.status() {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(refusal(&format!("checking for blob {digest}"), &answer)),
        }
    }

    async fn upload(&mut self, blob: &Blob) -> Result<(), Error> {
        let what = format!("uploading blob {}", blob.digest);
        let url = format!("{}/v2/{}/blobs/uploads/", self.base, self.repository);
        let session = self
            .send(Method::POST, &url, vec![], Bytes::new(), REQUEST_TIMEOUT)
            .await?;
        if session.status() != StatusCode::ACCEPTED {
            return Err(refusal(&what, &session));
        }
        let location = session
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| Error::Protocol(format!("{what}: the session has no Location")))?;
        let location = self.resolve(location)?;
        let separator = if location.contains('?') { '&' } else { '?' };
        let url = format!(
            "{location}{separator}digest={}",
            percent_encode(&blob.digest)
        );
        let headers = vec![
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, blob.bytes.len().to_string()),
        ];
        let done = self
            .send(
                Method::PUT,
                &url,
                headers,
                blob.bytes.clone(),
                UPLOAD_TIMEOUT,
            )
            .await?;
        if done.status() != StatusCode::CREATED {
            return Err(refusal(&what, &done));
        }
        Ok(())
    }

    /// Puts the manifest under the tag; its digest, as the registry computed it where it says.
    async fn put_manifest(&mut self, manifest: &Blob) -> Result<String, Error> {
        let tag = format!(
            "{}/v2/{}/manifests/{}",
            self.base, self.repository, self.tag
        );
        let headers = vec![(header::CONTENT_TYPE, manifest.media_type.clone())];
        let answer = self
            .send(
                Method::PUT,
                &tag,
                headers,
                manifest.bytes.clone(),
                REQUEST_TIMEOUT,
            )
            .await?;
        if answer.status() != StatusCode::CREATED {
            return Err(refusal("putting the manifest", &answer));
        }
        let said = answer
            .headers()
            .get("docker-content-digest")
            .and_then(|d| d.to_str().ok());
        if let Some(said) = said.filter(|d| *d != manifest.digest) {
            return Err(Error::Protocol(format!(
                "the registry stored the manifest as {said}, not {}",
                manifest.digest
            )));
        }
        Ok(manifest.digest.clone())
    }

    /// An upload session's `Location`: absolute, or a path on the registry.
    fn resolve(&self, location: &str) -> Result<String, Error> {
        if location.starts_with('/') {
            return Ok(format!("{}{location}", self.base));
        }
        let same_scheme = location
            .strip_prefix("https://")
            .or_else(|| location.strip_prefix("http://").filter(|_| self.plain_http));
        match same_scheme {
            Some(_) => Ok(location.to_owned()),
            None => Err(Error::Protocol(format!(
                "an upload session at {location:?}, neither a path nor a URL of this registry's \
                 scheme"
            ))),
        }
    }

    /// Sends a request, answering one authentication challenge: its answer, the body read up
    /// to [`MAX_ANSWER`].
    async fn send(
        &mut self,
        method: Method,
        url: &str,
        headers: Vec<(header::HeaderName, String)>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Bytes>, Error> {
        let answer = self
            .send_once(&method, url, &headers, body.clone(), timeout)
            .await?;
        if answer.status() != StatusCode::UNAUTHORIZED {
            return Ok(answer);
        }
        let challenge = answer
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|c| c.to_str().ok())
            .and_then(Challenge::parse)
            .ok_or_else(|| refusal(&format!("{method} {url}"), &answer))?;
        self.authorization = Some(self.authenticate(&challenge).await?);
        let answer = self
            .send_once(&method, url, &headers, body, timeout)
            .await?;
        if answer.status() == StatusCode::UNAUTHORIZED {
            return Err(Error::Unauthorized {
                registry: self.base.clone(),
                why: match self.credentials {
                    None => "no credentials were given or found in the Docker config".into(),
                    Some(_) => "it refused the credentials".into(),
                },
            });
        }
        Ok(answer)
    }

    async fn send_once(
        &self,
        method: &Method,
        url: &str,
        headers: &[(header::HeaderName, String)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Bytes>, Error> {
        let mut request = Request::builder().method(method.clone()).uri(url);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Error::Protocol(format!("{method} {url}: {e}")))?;
        fetch(&self.client, request, timeout).await
    }

    /// The `Authorization` header `challenge` asks for.
    async fn authenticate(&self, challenge: &Challenge) -> Result<String, Error> {
        let basic = self.credentials.as_ref().map(|c| {
            let pair = format!("{}:{}", c.username, c.password);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        match challenge.scheme.as_str() {
            "basic" => basic.ok_or_else(|| Error::Unauthorized {
                registry: self.base.clone(),
                why: "it asks for a user and password, and none were given or found in the \
                      Docker config"
                    .into(),
            }),
            "bearer" => {
                let realm = challenge
                    .param("realm")
                    .ok_or_else(|| Error::Protocol("a Bearer challenge without a realm".into()))?;
                if !(realm.starts_with("https://")
                    || (self.plain_http && realm.starts_with("http://")))
                {
                    return Err(Error::Protocol(format!(
                        "the token realm {realm:?} is not an HTTPS URL"
                    )));
                }
                let scope = format!("repository:{}:pull,push", self.repository);
                let mut url = format!("{realm}?scope={}", percent_encode(&scope));
                if let Some(service) = challenge.param("service") {
                    url.push_str(&format!("&service={}", percent_encode(service)));
                }
                let mut request = Request::builder().method(Method::GET).uri(&url);
                if let Some(basic) = &basic {
                    request = request.header(header::AUTHORIZATION, basic);
                }
                let request = request
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| Error::Protocol(format!("the token request: {e}")))?;
                let answer = fetch(&self.client, request, REQUEST_TIMEOUT).await?;
                if answer.status() != StatusCode::OK {
                    return Err(Error::Unauthorized {
                        registry: self.base.clone(),
                        why: format!("its token service answered {}", answer.status()),
                    });
                }
                let json: serde_json::Value = serde_json::from_slice(answer.body())
                    .map_err(|e| Error::Protocol(format!("the token service's answer: {e}")))?;
                let token = json["token"]
                    .as_str()
                    .or_else(|| json["access_token"].as_str())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        Error::Protocol("the token service's answer has no token".into())
                    })?;
                Ok(format!("Bearer {token}"))
            }
            other => Err(Error::Protocol(format!(
                "the registry asks for {other} authentication, which meshbench does not speak"
            ))),
        }
    }
}

/// One request, its whole answer within `timeout`.
async fn fetch(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<Response<Bytes>, Error> {
    let what = format!("{} {}", request.method(), request.uri());
    let exchange = async {
        let answer = client
            .request(request)
            .await
            .map_err(|e| Error::Http(format!("{what}: {}", with_causes(&e))))?;
        let (parts, body) = answer.into_parts();
        let body = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| Error::Http(format!("{what}: the answer: {e}")))?
            .to_bytes();
        Ok(Response::from_parts(parts, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Error::Http(format!("{what}: no answer within {} s", timeout.as_secs())))?
}

/// `error` and each cause under it (the client's own says only "client error (Connect)"; the
/// TLS handshake's says which certificate was refused).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// HTTPS (HTTP too, for a registry asked for with plain HTTP) with this machine's trusted
/// roots and `ca_certs`' certificates.
fn http_client(ca_certs: Option<&std::path::Path>) -> Result<HttpClient, Error> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A root this machine trusts that rustls cannot use is left out, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_certs {
        let bad = |why: String| Error::CaCerts {
            path: path.to_owned(),
            why,
        };
        let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate in it".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Http(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The error a registry gave: its status and its `errors` (the distribution API's), or the
/// start of its body.
fn refusal(what: &str, answer: &Response<Bytes>) -> Error {
    let body = answer.body();
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|json| {
            let errors: Vec<String> = json["errors"]
                .as_array()?
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e["code"].as_str().unwrap_or("?"),
                        e["message"].as_str().unwrap_or("")
                    )
                })
                .collect();
            Some(errors.join("; "))
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    Error::Registry {
        what: what.to_owned(),
        status: answer.status().as_u16(),
        message,
    }
}

/// Everything but RFC 3986's unreserved characters, percent-encoded (a query's values).
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `WWW-Authenticate` challenge: its scheme (lowercase) and parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The first challenge of a header value (`Bearer realm="...",service="..."`); `None`
    /// for what is not one.
    pub fn parse(header: &str) -> Option<Challenge> {
        let header = header.trim();
        let (scheme, mut rest) = match header.split_once(char::is_whitespace) {
            Some((scheme, rest)) => (scheme, rest.trim_start()),
            None => (header, ""),
        };
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return None;
        }
        let mut params = vec![];
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let key = key.trim().to_ascii_lowercase();
            if key.is_empty() || key.contains(char::is_whitespace) {
                return None;
            }
            let after = after.trim_start();
            let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
                // A quoted string, `\` escaping the next character.
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.push(chars.next()?.1),
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end?..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            };
            params.push((key, value));
            rest = tail.trim_start();
            match rest.strip_prefix(',') {
                Some(next) => rest = next.trim_start(),
                None if rest.is_empty() => {}
                None => return None,
            }
        }
        Some(Challenge {
            scheme: scheme.to_ascii_lowercase(),
            params,
        })
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/x:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("scope"), Some("repository:library/x:pull,push"));
        let c = Challenge::parse(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.param("realm")),
            ("basic", Some("Registry Realm"))
        );
        let c = Challenge::parse(r#"Bearer realm="a\"b", error=insufficient_scope"#).unwrap();
        assert_eq!(c.param("realm"), Some("a\"b"));
        assert_eq!(c.param("error"), Some("insufficient_scope"));
        for bad in [
            "",
            "Bearer realm=\"unterminated",
            "Bearer =x",
            "B@d realm=x",
        ] {
            assert_eq!(Challenge::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            percent_encode("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
        assert_eq!(percent_encode("sha256:0f"), "sha256%3A0f");
    }

    proptest! {
        #[test]
        fn parsing_any_header_never_panics(header in ".{0,200}") {
            let _ = Challenge::parse(&header);
        }
    }
}
