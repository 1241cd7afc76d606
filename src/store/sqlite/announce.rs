//! Announcements between the command line and the gateway serving one SQLite store: a Unix
//! socket in the data directory, `peergate.changes.sock`, bound by the serving gateway (which
//! holds the directory's serving lock, so a socket file left by a process that died is surely
//! stale). After each change it commits, the command line connects, writes its notes one a
//! line, and waits (at most [`ANSWER_WITHIN`]) until the gateway says it applied them, so a
//! token `peer add` prints works at once.
//!
//! The data directory is its owner's alone (mode 0700), and the socket is made 0600 too, so
//! only the user the gateway runs as can announce. What is announced is only ever a hint to
//! read the store again; one that is lost (no gateway, a gateway too busy to answer) costs
//! the time until the gateway's periodic re-read.

use super::super::{Announcements, Heard, LONGEST_NOTE, StoreError};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

/// The socket's name in the data directory.
pub const SOCKET_FILE: &str = "peergate.changes.sock";

/// The longest path a Unix socket can be bound at (`sun_path` holds 108 bytes with its NUL).
const LONGEST_SOCKET_PATH: usize = 107;

/// How long the command line waits for the gateway to apply what it announced, and the gateway
/// for the command line to finish writing.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Notes one announcement may carry.
const MOST_NOTES: usize = 64;

/// The socket of the store whose database is `database`.
pub(super) fn socket_path(database: &Path) -> PathBuf {
    database.with_file_name(SOCKET_FILE)
}

/// Sends the notes to the serving gateway, if one listens, and waits until it applied them.
pub(super) async fn announce(database: &Path, notes: &[String]) {
    let notes: Vec<&String> = notes
        .iter()
        .filter(|n| n.len() <= LONGEST_NOTE && !n.contains('\n'))
        .take(MOST_NOTES)
        .collect();
    if notes.is_empty() {
        return;
    }
    let told = tokio::time::timeout(ANSWER_WITHIN, async {
        let mut stream = tokio::net::UnixStream::connect(socket_path(database)).await?;
        let mut text = String::new();
        for note in notes {
            text.push_str(note);
            text.push('\n');
        }
        stream.write_all(text.as_bytes()).await?;
        stream.shutdown().await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    })
    .await;
    match told {
        Ok(Ok(answer)) if answer == "applied\n" => {}
        // No gateway serves the store: nobody to tell.
        Ok(Err(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) => {}
        _ => tracing::warn!(
            "the running gateway did not confirm the change; it applies it within seconds (its periodic re-read and credential cache time)"
        ),
    }
}

/// Binds the socket and forwards what arrives; the socket file goes when the receiver drops.
pub(super) fn hear(database: &Path) -> Result<Announcements, StoreError> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let path = socket_path(database);
    if path.as_os_str().len() > LONGEST_SOCKET_PATH {
        return Err(StoreError::Engine(
            format!(
                "the data directory's path is too long for the change socket ({} bytes; a Unix socket path holds at most {LONGEST_SOCKET_PATH})",
                path.as_os_str().len()
            )
            .into(),
        ));
    }
    // Left by a gateway that died: this one holds the serving lock now. Anything that is not
    // a socket is left alone (and the bind below fails, naming why).
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(&path);
    }
    // Bound under a name of its own, made 0600, and only then given its known name: nobody
    // else can connect in between, whatever the umask and the directory's mode.
    let unready = path.with_file_name(format!("{SOCKET_FILE}.{}", uuid::Uuid::new_v4().simple()));
    let listener = tokio::net::UnixListener::bind(&unready).map_err(|e| {
        StoreError::Engine(format!("cannot bind {SOCKET_FILE}: {}", e.kind()).into())
    })?;
    let ready = std::fs::set_permissions(&unready, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&unready, &path));
    if let Err(e) = ready {
        let _ = std::fs::remove_file(&unready);
        return Err(StoreError::DataDir(e.kind()));
    }
    let (heard, announcements) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        let _bound = RemoveOnDrop(path);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = heard.closed() => return,
            };
            if let Ok((stream, _)) = accepted {
                tokio::spawn(answer(stream, heard.clone()));
            }
        }
    });
    Ok(announcements)
}

/// Reads one announcement, hands its notes on, and answers once they are applied.
async fn answer(stream: tokio::net::UnixStream, heard: tokio::sync::mpsc::Sender<Heard>) {
    let (read, mut write) = stream.into_split();
    let limit = u64::try_from((LONGEST_NOTE + 1) * MOST_NOTES).unwrap_or(u64::MAX);
    let mut lines = tokio::io::BufReader::new(read.take(limit)).lines();
    let read_all = tokio::time::timeout(ANSWER_WITHIN, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if heard.send(Heard::Note(line)).await.is_err() {
                return false;
            }
        }
        true
    });
    if !matches!(read_all.await, Ok(true)) {
        return;
    }
    let (done, applied) = tokio::sync::oneshot::channel();
    if heard.send(Heard::Applied(done)).await.is_ok()
        && tokio::time::timeout(ANSWER_WITHIN, applied).await.is_ok()
    {
        let _ = write.write_all(b"applied\n").await;
    }
}

/// Removes the socket file when the gateway stops hearing.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notes_are_heard_in_order_and_the_announcer_waits_until_they_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("peergate.sqlite3");
        // Nobody hears yet: announcing is not an error, and waits for nobody.
        announce(&database, &["early".to_owned()]).await;
        let mut heard = hear(&database).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(socket_path(&database))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let applied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let applier = {
            let applied = applied.clone();
            tokio::spawn(async move {
                while let Some(heard) = heard.recv().await {
                    match heard {
                        Heard::Note(note) => applied.lock().unwrap().push(note),
                        Heard::Applied(done) => {
                            let _ = done.send(());
                        }
                        Heard::Missed => {}
                    }
                }
            })
        };
        announce(&database, &["one".to_owned(), "two".to_owned()]).await;
        assert_eq!(
            *applied.lock().unwrap(),
            ["one", "two"],
            "applied before it returned"
        );
        applier.abort();
        let _ = applier.await;
        for _ in 0..100 {
            if !socket_path(&database).exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!socket_path(&database).exists(), "the socket file stayed");
    }
}
