//! The E3 application's entry point: a real reverse proxy (nginx) routing path prefixes to
//! the application's services, as the study put all of them behind one proxy.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use meshbench_lab::{LabComponent, Launch, Readiness};

use crate::configs::nginx::NGINX;
use crate::configs::{nginx_gateway, GatewayRoute};
use crate::Error;

impl GatewayRoute {
    /// Parses `PREFIX=http://HOST:PORT[/PATH]`.
    pub fn parse(spec: &str) -> Result<GatewayRoute, String> {
        let (prefix, url) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?}: expected PREFIX=http://HOST:PORT[/PATH]"))?;
        if !prefix.starts_with('/') {
            return Err(format!(
                "{spec:?}: the prefix {prefix:?} does not start with /"
            ));
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{spec:?}: the upstream {url:?} is not an http:// URL"))?;
        let (upstream, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(rest[i..].to_owned())),
            None => (rest, None),
        };
        let port_ok = upstream
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!(
                "{spec:?}: the upstream {upstream:?} is not HOST:PORT"
            ));
        }
        let unsafe_char = |c: char| c.is_whitespace() || matches!(c, ';' | '{' | '}' | '"');
        if spec.contains(unsafe_char) {
            return Err(format!(
                "{spec:?}: spaces, quotes, braces and ; are not allowed"
            ));
        }
        Ok(GatewayRoute {
            prefix: prefix.to_owned(),
            upstream: upstream.to_owned(),
            path,
        })
    }
}

/// Writes the gateway's nginx configuration under `dir` and starts nginx as `launch` says,
/// returning once it listens on `listen`.
pub async fn start_gateway(
    dir: &Path,
    listen: SocketAddr,
    routes: &[GatewayRoute],
    launch: &Launch,
) -> Result<LabComponent, Error> {
    let nginx = crate::tool::binary("nginx-sidecar", NGINX)?;
    let io = |source| Error::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let config = dir.join("nginx.conf");
    std::fs::write(&config, nginx_gateway(dir, listen, routes)).map_err(io)?;
    let args = vec![
        "-c".to_owned(),
        config.display().to_string(),
        "-p".to_owned(),
        dir.display().to_string(),
        "-e".to_owned(),
        "stderr".to_owned(),
    ];
    let component = LabComponent::start(
        "gateway",
        "app",
        launch,
        &nginx,
        &args,
        Readiness::Listening(listen.port()),
        Duration::from_secs(10),
    )
    .await?;
    Ok(component)
}
