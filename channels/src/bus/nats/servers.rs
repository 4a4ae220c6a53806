//! The servers of a bus URL and the login written in it.
//!
//! async-nats takes only the scheme, host and port from a server URL: a user, password or token
//! written in it (`nats://user:pass@host`, `nats://TOKEN@host`) is never sent, and the server
//! answers "authorization violation". So the login is taken out of the URLs here and given to
//! the client as its own setting, which it sends to every server of the list (and to servers
//! the cluster announces), and the URLs handed to the client carry no credentials at all.

use async_nats::{ConnectOptions, ServerAddr};
use percent_encoding::percent_decode_str;

/// A login written in the bus URL. Deliberately not `Debug`: it holds secrets.
#[derive(PartialEq, Eq)]
pub(super) enum Login {
    /// `nats://user:password@host`.
    UserPassword { user: String, password: String },
    /// `nats://TOKEN@host`: a user part without a password is a token, as in other NATS clients.
    Token(String),
}

impl Login {
    pub(super) fn apply(&self, options: ConnectOptions) -> ConnectOptions {
        match self {
            Login::UserPassword { user, password } => options.user_and_password(user.clone(), password.clone()),
            Login::Token(token) => options.token(token.clone()),
        }
    }
}

/// What is wrong with a bus URL. The texts never quote the URL or its credentials.
#[derive(Debug, thiserror::Error)]
pub(super) enum ServerUrlError {
    #[error("no server URL given")]
    Empty,
    #[error("server URL {position} of the list is invalid: {reason}")]
    Invalid { position: usize, reason: String },
    #[error("the user or password in server URL {position} is not UTF-8 once percent-decoded")]
    NotUtf8 { position: usize },
    #[error(
        "the server URLs carry different credentials; the client logs in to every server the \
         same way, so write them in one URL or the same in each"
    )]
    DifferentLogins,
}

/// The servers to connect to, without credentials, and the login their URLs carried.
pub(super) struct Servers {
    pub(super) addrs: Vec<ServerAddr>,
    pub(super) login: Option<Login>,
}

/// Parses a comma-separated list of server URLs (one URL being the usual case). A URL without
/// a login uses the one written in another URL of the list.
pub(super) fn parse(url: &str) -> Result<Servers, ServerUrlError> {
    let mut addrs = Vec::new();
    let mut login: Option<Login> = None;
    let parts = url.split(',').map(str::trim).filter(|part| !part.is_empty());
    for (index, part) in parts.enumerate() {
        let position = index + 1;
        let addr: ServerAddr = part
            .parse()
            .map_err(|err: std::io::Error| ServerUrlError::Invalid { position, reason: err.to_string() })?;
        let (addr, found) = take_login(addr, position)?;
        match (&login, found) {
            (_, None) => {}
            (None, found) => login = found,
            (Some(known), Some(found)) if *known == found => {}
            (Some(_), Some(_)) => return Err(ServerUrlError::DifferentLogins),
        }
        addrs.push(addr);
    }
    if addrs.is_empty() {
        return Err(ServerUrlError::Empty);
    }
    Ok(Servers { addrs, login })
}

/// Splits the percent-decoded login off a server address.
fn take_login(addr: ServerAddr, position: usize) -> Result<(ServerAddr, Option<Login>), ServerUrlError> {
    let user = decode(addr.username().unwrap_or_default(), position)?;
    let password = addr.password().map(|password| decode(password, position)).transpose()?;
    let login = match password {
        Some(password) => Login::UserPassword { user, password },
        None if !user.is_empty() => Login::Token(user),
        None => return Ok((addr, None)),
    };
    let invalid = |reason: String| ServerUrlError::Invalid { position, reason };
    let mut url = addr.into_inner();
    // Only URLs without a host refuse a user part, and a URL with a login has a host.
    url.set_password(None)
        .and_then(|()| url.set_username(""))
        .map_err(|()| invalid("its credentials cannot be separated from the host".to_owned()))?;
    let addr = ServerAddr::from_url(url).map_err(|err| invalid(err.to_string()))?;
    Ok((addr, Some(login)))
}

/// URLs carry their user part percent-encoded (`p%40ss` for `p@ss`).
fn decode(encoded: &str, position: usize) -> Result<String, ServerUrlError> {
    percent_decode_str(encoded).decode_utf8().map(String::from).map_err(|_| ServerUrlError::NotUtf8 { position })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_password(servers: &Servers) -> (&str, &str) {
        match &servers.login {
            Some(Login::UserPassword { user, password }) => (user, password),
            _ => panic!("expected a user and password"),
        }
    }

    #[test]
    fn user_and_password_are_percent_decoded_and_taken_out_of_the_url() {
        let servers = parse("nats://switch%20board:p%40ss%3Aw%2Frd@127.0.0.1:4222").unwrap();
        assert_eq!(user_password(&servers), ("switch board", "p@ss:w/rd"));
        assert_eq!(servers.addrs.len(), 1);
        assert_eq!(servers.addrs[0].as_url_str(), "nats://127.0.0.1:4222");
        assert!(servers.addrs[0].username().is_none() && servers.addrs[0].password().is_none());
    }

    #[test]
    fn a_user_part_without_password_is_a_token() {
        let servers = parse("tls://s3cr%2Ft@nats.example.com").unwrap();
        assert!(matches!(&servers.login, Some(Login::Token(token)) if token == "s3cr/t"));
        assert_eq!(servers.addrs[0].host(), "nats.example.com");
        assert!(servers.addrs[0].tls_required());
        assert!(!servers.addrs[0].as_url_str().contains("s3cr"));
    }

    #[test]
    fn urls_without_login_have_none() {
        let servers = parse("nats://127.0.0.1:4222").unwrap();
        assert!(servers.login.is_none());
        assert_eq!(servers.addrs[0].port(), 4222);
        // Like async-nats itself: no scheme means nats://.
        assert_eq!(parse("127.0.0.1:4333").unwrap().addrs[0].as_url_str(), "nats://127.0.0.1:4333");
    }

    #[test]
    fn a_list_shares_the_login_written_in_one_or_all_of_its_urls() {
        let servers = parse("nats://a:4222, nats://u:p@b:4222,nats://c:4222").unwrap();
        assert_eq!(user_password(&servers), ("u", "p"));
        let hosts: Vec<_> = servers.addrs.iter().map(ServerAddr::host).collect();
        assert_eq!(hosts, ["a", "b", "c"]);
        let same = parse("nats://u:p@a,nats://u:p@b").unwrap();
        assert_eq!(user_password(&same), ("u", "p"));
        assert_eq!(same.addrs.len(), 2);
    }

    #[test]
    fn different_logins_in_a_list_are_refused_without_quoting_them() {
        for url in ["nats://u:secret-1@a,nats://u:secret-2@b", "nats://u:secret-1@a,nats://secret-2@b"] {
            let err = parse(url).err().expect("refused");
            assert!(matches!(err, ServerUrlError::DifferentLogins), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn bad_urls_name_their_position_without_their_credentials() {
        let err = parse("nats://a:4222,nats://u:s3cret@b:notaport").err().expect("refused");
        assert!(matches!(err, ServerUrlError::Invalid { position: 2, .. }), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(matches!(parse("http://u:p@a").err(), Some(ServerUrlError::Invalid { position: 1, .. })));
        assert!(matches!(parse("nats://u:%FF@a").err(), Some(ServerUrlError::NotUtf8 { position: 1 })));
        assert!(matches!(parse(" , ").err(), Some(ServerUrlError::Empty)));
    }
}
