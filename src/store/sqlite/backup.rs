//! `peergate backup`: a consistent copy of the embedded store, written where nobody else can
//! see or replace it.

use super::{BUSY_TIMEOUT, DATABASE_FILE};
use std::path::{Path, PathBuf};

/// Writes a consistent copy of the store in `data_dir` to `file` (which must not exist), with
/// SQLite's `VACUUM INTO` on a read-only connection: a snapshot as of one moment, taken while a
/// gateway may be writing, and compacted. Returns its size in bytes.
///
/// The copy holds what the store holds (credential hashes, conversations), and `file` may be in
/// a directory other users can write to, so nobody else may see or replace it at any moment:
///
/// * a directory writable by other users without the sticky bit is refused (any of them could
///   rename our file away or put a link in its place);
/// * the copy is written into a private directory (mode 0700) made beside `file`, made 0600,
///   checked (`PRAGMA integrity_check`, and not empty), and only then moved to `file` with a
///   rename that never replaces (or a hard link where the file system has no such rename): an
///   existing `file`, a symbolic link included, is never written through or over;
/// * what is at `file` afterwards is checked to be that copy before success is reported.
pub fn backup(data_dir: &Path, file: &Path) -> Result<u64, String> {
    let database = data_dir.join(DATABASE_FILE);
    if !database.is_file() {
        return Err(format!(
            "no SQLite store in {} (no {DATABASE_FILE}); give the data directory with --data",
            data_dir.display()
        ));
    }
    let name = file
        .file_name()
        .ok_or_else(|| format!("{} names no file", file.display()))?;
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    backup_directory_is_private_enough(&parent)?;
    if std::fs::symlink_metadata(file).is_ok() {
        return Err(format!(
            "{} exists already; a backup never overwrites",
            file.display()
        ));
    }
    let scratch = private_scratch_dir(&parent)?;
    let staged = scratch.path.join("copy.sqlite3");
    let outcome = copy_and_check(&database, &staged).and_then(|(size, identity)| {
        place_without_replacing(&staged, &parent, name, file)?;
        check_placed(file, identity, size)?;
        Ok(size)
    });
    drop(scratch);
    outcome
}

/// Refuses a directory that belongs to another user (root's aside: it may rename what is in
/// it), or that other users may write to unless it has the sticky bit.
fn backup_directory_is_private_enough(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let metadata = std::fs::metadata(dir)
        .map_err(|e| format!("cannot use the directory {}: {}", dir.display(), e.kind()))?;
    let owner = metadata.uid();
    if owner != 0 && owner != rustix::process::geteuid().as_raw() {
        return Err(format!(
            "{} belongs to another user, who could replace the copy; write it to a directory of your own",
            dir.display()
        ));
    }
    let mode = metadata.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "{} is writable by other users and has no sticky bit, so another user could replace the copy; write it to a directory only you can write to",
            dir.display()
        ));
    }
    Ok(())
}

/// A directory of this user's alone beside the copy's place, removed with what it holds when
/// dropped.
struct ScratchDir {
    path: PathBuf,
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn private_scratch_dir(parent: &Path) -> Result<ScratchDir, String> {
    use std::os::unix::fs::DirBuilderExt as _;
    for _ in 0..16 {
        let path = parent.join(format!(
            ".peergate-backup-{}",
            uuid::Uuid::new_v4().simple()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(ScratchDir { path }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "cannot make a private directory in {}: {}",
                    parent.display(),
                    e.kind()
                ));
            }
        }
    }
    Err(format!(
        "cannot make a private directory in {}",
        parent.display()
    ))
}

/// The device and inode of a file, to tell it from any other.
type FileIdentity = (u64, u64);

/// Copies the store to `staged` and checks the copy; returns its size and identity.
fn copy_and_check(database: &Path, staged: &Path) -> Result<(u64, FileIdentity), String> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let failed = |e: rusqlite::Error| format!("the copy failed, and nothing was left behind: {e}");
    let connection = rusqlite::Connection::open_with_flags(
        database,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    connection.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
    let target = staged
        .to_str()
        .ok_or_else(|| "the backup's directory is not UTF-8".to_owned())?;
    // Created here, empty and 0600, before SQLite writes into it (VACUUM INTO takes an empty
    // file): the copy is never readable by others, whatever the umask.
    let mut created = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::mode(created.write(true).create_new(true), 0o600);
    created
        .open(staged)
        .map_err(|e| format!("cannot create the copy: {}", e.kind()))?;
    connection
        .execute("VACUUM INTO ?1", [target])
        .map_err(failed)?;
    drop(connection);
    std::fs::set_permissions(staged, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("the copy vanished while it was made: {}", e.kind()))?;
    let copy = rusqlite::Connection::open_with_flags(
        staged,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("the copy cannot be opened to check it: {e}"))?;
    let verdict: String = copy
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .map_err(|e| format!("the copy cannot be checked: {e}"))?;
    let tables: i64 = copy
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |row| row.get(0),
        )
        .map_err(|e| format!("the copy cannot be checked: {e}"))?;
    drop(copy);
    if verdict != "ok" || tables == 0 {
        return Err(
            "the copy did not pass SQLite's integrity check; nothing was left behind".to_owned(),
        );
    }
    let file = std::fs::File::open(staged)
        .map_err(|e| format!("the copy vanished while it was checked: {}", e.kind()))?;
    file.sync_all()
        .map_err(|e| format!("the copy could not be written to disk: {}", e.kind()))?;
    let metadata = file
        .metadata()
        .map_err(|e| format!("the copy vanished while it was checked: {}", e.kind()))?;
    if metadata.len() == 0 {
        return Err("the copy came out empty; nothing was left behind".to_owned());
    }
    Ok((metadata.len(), (metadata.dev(), metadata.ino())))
}

/// Moves `staged` to `parent`/`name` (`file`) without ever replacing what is there.
fn place_without_replacing(
    staged: &Path,
    parent: &Path,
    name: &std::ffi::OsStr,
    file: &Path,
) -> Result<(), String> {
    let exists = || {
        format!(
            "{} appeared while the copy was made; a backup never overwrites, and nothing was left behind",
            file.display()
        )
    };
    let renamed = rustix::fs::renameat_with(
        rustix::fs::CWD,
        staged,
        rustix::fs::CWD,
        parent.join(name),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    match renamed {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => Err(exists()),
        // A file system without a rename that never replaces: a hard link never replaces
        // either (the scratch directory, and the name there, go when it is dropped).
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            std::fs::hard_link(staged, file).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => exists(),
                kind => format!("cannot put the copy at {}: {kind}", file.display()),
            })
        }
        Err(e) => Err(format!(
            "cannot put the copy at {}: {}",
            file.display(),
            std::io::Error::from(e).kind()
        )),
    }
}

/// Checks that what is at `file` is the copy made (not a link, nothing swapped in since).
fn check_placed(file: &Path, identity: FileIdentity, size: u64) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_no_follow())
        .open(file)
        .and_then(|f| f.metadata());
    match opened {
        Ok(m) if (m.dev(), m.ino()) == identity && m.len() == size && m.mode() & 0o077 == 0 => {
            Ok(())
        }
        _ => Err(format!(
            "the copy at {} was removed or replaced before it could be checked; do not use what is there",
            file.display()
        )),
    }
}

/// `O_NOFOLLOW`, from the platform's own definition.
fn libc_no_follow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}
