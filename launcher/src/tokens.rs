//! The demo's bearer tokens: `lb up` runs with auth on, as production should.
//!
//! One token per role (operator, viewer, service for the master, agent for the agents), random,
//! kept in `<data dir>/tokens.toml` (mode 0600) and reused on every restart of the same data
//! directory, so a browser session or an lbctl config keeps working. `up` also writes
//! `<data dir>/lbctl.toml` (0600) with the URLs of this run and the operator token:
//! `lbctl --config <data dir>/lbctl.toml …`.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The tokens file in a data directory.
pub const TOKENS_FILE: &str = "tokens.toml";
/// The lbctl config `up` writes beside it.
pub const LBCTL_FILE: &str = "lbctl.toml";
/// 24 random bytes, 48 hex characters: far past guessing, and past the servers' 16-character
/// minimum.
const TOKEN_BYTES: usize = 24;

/// A named token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoToken {
    pub name: String,
    pub token: String,
}

/// The demo's four tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoTokens {
    /// An SRE: reads, actions, approvals, the halt switch (console, lbctl).
    pub operator: DemoToken,
    /// Reads only.
    pub viewer: DemoToken,
    /// The master, towards the ops server.
    pub service: DemoToken,
    /// The agents, towards the ops server.
    pub agent: DemoToken,
}

impl DemoTokens {
    /// The tokens of `data_dir`: read from its tokens file, or made and written there (0600).
    pub fn load_or_create(data_dir: &Path) -> anyhow::Result<Self> {
        let path = data_dir.join(TOKENS_FILE);
        if path.exists() {
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            return toml::from_str(&text).with_context(|| format!("{} is not lb up's tokens file", path.display()));
        }
        let token = |name: &str| -> anyhow::Result<DemoToken> {
            Ok(DemoToken { name: name.to_owned(), token: random_token()? })
        };
        let tokens = Self {
            operator: token("operator")?,
            viewer: token("viewer")?,
            service: token("master")?,
            agent: token("agents")?,
        };
        let text = format!(
            "# lb up's bearer tokens for this data directory, reused on every restart. Keep it\n\
             # private; delete it to make new ones.\n{}",
            toml::to_string(&tokens).context("tokens serialise")?
        );
        write_private(&path, &text)?;
        Ok(tokens)
    }

    /// Known people's tokens (tests), with fresh ones for the master and the agents.
    pub fn with_people(operator: DemoToken, viewer: DemoToken) -> anyhow::Result<Self> {
        let token = |name: &str| -> anyhow::Result<DemoToken> {
            Ok(DemoToken { name: name.to_owned(), token: random_token()? })
        };
        Ok(Self { operator, viewer, service: token("master")?, agent: token("agents")? })
    }

    /// `[[auth.tokens]]` of the ops server: all four roles.
    pub fn ops_server_toml(&self) -> String {
        [(&self.service, "service"), (&self.agent, "agent"), (&self.operator, "operator"), (&self.viewer, "viewer")]
            .iter()
            .map(|(t, role)| entry(t, role))
            .collect()
    }

    /// `[[auth.tokens]]` of the master: the people.
    pub fn master_toml(&self) -> String {
        entry(&self.operator, "operator") + &entry(&self.viewer, "viewer")
    }
}

fn entry(token: &DemoToken, role: &str) -> String {
    format!("[[auth.tokens]]\nname = \"{}\"\ntoken = \"{}\"\nrole = \"{role}\"\n", token.name, token.token)
}

fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0_u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the demo's tokens")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `<data dir>/lbctl.toml` (private): the run's master and ops server URLs and the
/// operator token, for `lbctl --config`. `by` names what wrote it (`lb up`, ...).
pub fn write_lbctl_config(
    data_dir: &Path,
    by: &str,
    master_addr: std::net::SocketAddr,
    ops_url: &str,
    tokens: &DemoTokens,
) -> anyhow::Result<std::path::PathBuf> {
    let path = data_dir.join(LBCTL_FILE);
    write_private(
        &path,
        &format!(
            "# Written by {by} for this run: lbctl --config {} <command>
             master_url = \"http://{master_addr}\"\nops_url = \"{ops_url}\"\ntoken = \"{}\"\n",
            path.display(),
            tokens.operator.token
        ),
    )?;
    Ok(path)
}

/// Writes `text` to `path`, readable by its owner only (also when the file existed).
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))
}
