//! Which log lines are written, changed while serving: `log.level` of the policy, applied at
//! start-up and again by a reload, unless `RUST_LOG` was set (then it decides, as the policy
//! says). The process has one logger, so its control is the process's too.

use std::sync::OnceLock;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The logger's filter, and whether `RUST_LOG` set it.
struct Control {
    handle: reload::Handle<EnvFilter, Registry>,
    from_env: bool,
}

static CONTROL: OnceLock<Control> = OnceLock::new();

/// What became of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LevelSet {
    /// The logger writes by it from now on.
    Applied,
    /// `RUST_LOG` decides, so the policy's level is not used.
    EnvironmentDecides,
    /// No logger of this process's own (a test's gateway in its process).
    NoLogger,
}

/// Hands the logger's filter to the level control (once, by `main`).
pub fn install(handle: reload::Handle<EnvFilter, Registry>, from_env: bool) {
    let _ = CONTROL.set(Control { handle, from_env });
}

/// Writes lines by `directives` (`RUST_LOG` syntax) from now on, unless `RUST_LOG` decides.
pub fn set(directives: &str) -> Result<LevelSet, String> {
    let filter = EnvFilter::builder()
        .parse(directives)
        .map_err(|e| format!("log.level: not a RUST_LOG directive list ({e})"))?;
    let Some(control) = CONTROL.get() else {
        return Ok(LevelSet::NoLogger);
    };
    if control.from_env {
        return Ok(LevelSet::EnvironmentDecides);
    }
    control
        .handle
        .reload(filter)
        .map_err(|e| format!("log.level: the logger took no new level ({e})"))?;
    Ok(LevelSet::Applied)
}
