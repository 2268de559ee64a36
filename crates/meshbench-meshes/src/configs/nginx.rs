//! nginx sidecars (one worker, HTTP proxying with upstream keep-alive). nginx cannot read URI
//! SANs: the outbound side checks the server's DNS SAN (`proxy_ssl_name`), the inbound side
//! the client's chain. Every path nginx writes is under the sidecar's own directory so it runs
//! as the unprivileged proxy user.

use std::net::SocketAddr;
use std::path::Path;

use crate::tool::Tool;

use super::p;

pub(crate) const NGINX: Tool = Tool::new("nginx", "apt-get install -y nginx-light", &["-v"]);

pub struct NginxTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
}

fn common(dir: &Path, server: &str) -> String {
    let d = p(dir);
    format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         {server}}}\n"
    )
}

/// Plaintext HTTP in on `listen`, mTLS to `upstream`, which must present `upstream_dns`.
/// `dir` holds nginx's pid, log and temporary files.
pub fn nginx_outbound(
    dir: &Path,
    listen: SocketAddr,
    upstream: SocketAddr,
    upstream_dns: &str,
    tls: &NginxTls<'_>,
) -> String {
    let server = format!(
        "  upstream up {{ server {upstream}; keepalive 64; }}\n  server {{\n    listen {listen};\n    keepalive_requests 100000;\n    location / {{\n\
         \x20     proxy_pass https://up;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
         \x20     proxy_ssl_certificate {};\n      proxy_ssl_certificate_key {};\n\
         \x20     proxy_ssl_trusted_certificate {};\n      proxy_ssl_verify on;\n\
         \x20     proxy_ssl_name {upstream_dns};\n      proxy_ssl_server_name on;\n\
         \x20     proxy_ssl_protocols TLSv1.3;\n      proxy_ssl_session_reuse on;\n    }}\n  }}\n",
        p(tls.cert),
        p(tls.key),
        p(tls.ca)
    );
    common(dir, &server)
}

/// mTLS in on `listen` (client certificate required), plaintext to `app`.
pub fn nginx_inbound(
    dir: &Path,
    listen: SocketAddr,
    app: SocketAddr,
    tls: &NginxTls<'_>,
) -> String {
    let server = format!(
        "  upstream app {{ server {app}; keepalive 64; }}\n  server {{\n    listen {listen} ssl;\n\
         \x20   ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_client_certificate {};\n\
         \x20   ssl_verify_client on;\n    ssl_protocols TLSv1.3;\n    keepalive_requests 100000;\n\
         \x20   location / {{\n      proxy_pass http://app;\n      proxy_http_version 1.1;\n\
         \x20     proxy_set_header Connection \"\";\n    }}\n  }}\n",
        p(tls.cert),
        p(tls.key),
        p(tls.ca)
    );
    common(dir, &server)
}

/// One `location` of the gateway: requests under `prefix` go to `upstream` (`host:port`);
/// with `path` set, nginx replaces the matched prefix with it (`/api/calculator/` -> `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRoute {
    pub prefix: String,
    pub upstream: String,
    pub path: Option<String>,
}

/// E3's entry point: one nginx in front of the application's services. Long experiments
/// must not hit a proxy timeout (E3's original did), so reads and sends may take an hour, and
/// an analyzer upload may be 32 MiB.
pub fn nginx_gateway(dir: &Path, listen: SocketAddr, routes: &[GatewayRoute]) -> String {
    let mut server = String::new();
    for (i, route) in routes.iter().enumerate() {
        server.push_str(&format!(
            "  upstream route{i} {{ server {}; keepalive 16; }}\n",
            route.upstream
        ));
    }
    server.push_str(&format!(
        "  server {{\n    listen {listen};\n    client_max_body_size 32m;\n    keepalive_requests 100000;\n\
         \x20   location = /healthz {{ default_type application/json; return 200 '{{\"status\":\"ok\",\"role\":\"gateway\"}}'; }}\n"
    ));
    for (i, route) in routes.iter().enumerate() {
        server.push_str(&format!(
            "    location {} {{\n      proxy_pass http://route{i}{};\n      proxy_http_version 1.1;\n\
             \x20     proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n\
             \x20     proxy_read_timeout 3600s;\n      proxy_send_timeout 3600s;\n    }}\n",
            route.prefix,
            route.path.as_deref().unwrap_or("")
        ));
    }
    server.push_str("  }\n");
    common(dir, &server)
}
