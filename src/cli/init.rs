//! `switchboard init`: the config file, then the workspaces it points at.

use std::path::PathBuf;

use super::CliError;
use crate::config::Config;
use crate::workspace::init;

pub(super) fn run(path: Option<PathBuf>) -> Result<(), CliError> {
    let path =
        match path.or_else(|| std::env::var_os("SWITCHBOARD_CONFIG").filter(|p| !p.is_empty()).map(PathBuf::from)) {
            Some(path) => path,
            None => dirs::config_dir().ok_or(CliError::NoConfigDir)?.join("switchboard").join("config.toml"),
        };
    let mut reports = vec![init::write_config(&path)?];
    // Loaded like `run` would, so the environment's overrides (data dir, workspace) apply.
    let config = Config::load_from_process_env(Some(&path))?;
    reports.extend(init::write_workspace(&config.agent.workspace)?);
    // Named agents get their own workspace, so their own persona and memory files.
    for agent in config.agents.values() {
        reports.extend(init::write_workspace(&agent.workspace)?);
    }
    for report in &reports {
        println!("{} {}", report.action, report.path.display());
    }
    println!(
        "\nNext: set your model and API key in {} (or OPENAI_API_KEY), edit the files in {} to \
         shape your agent, then start it with `switchboard run` and talk to it at http://{}/.",
        path.display(),
        config.agent.workspace.display(),
        config.channels.api.listen
    );
    Ok(())
}
