//! The resources of C2SP `tlog-tiles`: tiles of hashes and bundles of entries, by path.
//!
//! A tile at level `L`, index `N`, holds the hashes of tree level `8·L`, nodes `256·N` up to
//! 256 of them; a partial tile (`.p/<W>`) holds the first `W`. An entry bundle holds the entries
//! of the level-0 tile with the same index, each as a big-endian `u16` length and the bytes.

use super::Node;

/// Hashes per full tile, and the tree levels one tile level spans (`2^8 = 256`).
pub const WIDTH: u64 = 256;
/// Tree levels per tile level.
pub const HEIGHT: u8 = 8;

/// What a `tile/…` path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TilePath {
    /// A tile of hashes.
    Hashes {
        /// Tile level.
        level: u8,
        /// Tile index.
        index: u64,
        /// Hashes it holds (256: full).
        width: u64,
    },
    /// A bundle of entries.
    Entries {
        /// Tile index.
        index: u64,
        /// Entries it holds (256: full).
        width: u64,
    },
}

impl TilePath {
    /// Reads the part of a path after `tile/`; `None` when it is not a tile's path.
    pub fn parse(path: &str) -> Option<Self> {
        let (level, rest) = path.split_once('/')?;
        let (rest, width) = match rest.split_once(".p/") {
            Some((rest, width)) => (rest, partial_width(width)?),
            None => (rest, WIDTH),
        };
        let index = tile_index(rest)?;
        let tile = if level == "entries" {
            Self::Entries { index, width }
        } else {
            let one_digit = level.len() == 1 && level.bytes().all(|b| b.is_ascii_digit());
            let level: u8 = level.parse().ok().filter(|_| one_digit)?;
            Self::Hashes {
                level,
                index,
                width,
            }
        };
        tile.addressable().then_some(tile)
    }

    /// Whether every leaf under the tile has an index below 2^63: no tree gets that far, and
    /// nothing computed of a tile overflows. Level 6 is the highest with a tile.
    fn addressable(self) -> bool {
        let (level, index) = match self {
            Self::Hashes { level, index, .. } => (level, index),
            Self::Entries { index, .. } => (0, index),
        };
        let bits = 55u32.checked_sub(u32::from(level) * u32::from(HEIGHT));
        bits.is_some_and(|bits| index < 1 << bits)
    }

    /// The tree nodes whose hashes a tile of hashes holds; for a bundle, its level-0 nodes.
    pub fn nodes(self) -> impl Iterator<Item = Node> {
        let (level, index, width) = match self {
            Self::Hashes {
                level,
                index,
                width,
            } => (level * HEIGHT, index, width),
            Self::Entries { index, width } => (0, index, width),
        };
        (0..width).map(move |i| Node::new(level, index * WIDTH + i))
    }

    /// The path of this tile, after the log's prefix.
    pub fn path(self) -> String {
        match self {
            Self::Hashes {
                level,
                index,
                width,
            } => path(&level.to_string(), index, width),
            Self::Entries { index, width } => path("entries", index, width),
        }
    }

    /// Whether a tree of `size` leaves holds the whole tile.
    pub fn within(self, size: u64) -> bool {
        self.nodes()
            .last()
            .is_some_and(|node| node.leaves().1 <= size)
    }
}

/// Where a reader of tiles finds `node` of a tree of `size` leaves: the tile (as wide as that
/// tree has it), and the run of its hashes whose [`super::tree_hash`] is the node's hash (the
/// node's own hash when it sits on a tile level, else the subtree of tile hashes under it).
/// `None` when the tree does not hold the node.
pub fn tile_of(node: Node, size: u64) -> Option<(TilePath, usize, usize)> {
    if node.leaves().1 > size {
        return None;
    }
    let level = node.level / HEIGHT;
    let under = node.level % HEIGHT;
    let first = node.index << under;
    let index = first / WIDTH;
    let width = ((size >> (u32::from(level) * u32::from(HEIGHT))) - index * WIDTH).min(WIDTH);
    let tile = TilePath::Hashes {
        level,
        index,
        width,
    };
    Some((tile, (first % WIDTH) as usize, 1 << under))
}

/// `<W>` of `.p/<W>`: 1 to 255, no leading zero.
fn partial_width(text: &str) -> Option<u64> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || text.starts_with('0') || text.len() > 3 {
        return None;
    }
    let width: u64 = text.parse().ok()?;
    (1..WIDTH).contains(&width).then_some(width)
}

/// `<N>`: three-digit groups, every one but the last prefixed with `x` (`x001/x234/067`).
fn tile_index(text: &str) -> Option<u64> {
    let groups: Vec<&str> = text.split('/').collect();
    let (last, leading) = groups.split_last()?;
    let mut index: u64 = 0;
    for (i, group) in leading
        .iter()
        .map(|g| g.strip_prefix('x'))
        .chain([Some(*last)])
        .enumerate()
    {
        let group = group?;
        if group.len() != 3 || !group.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // No leading group of zeros: each index has one path.
        if i == 0 && group == "000" && !leading.is_empty() {
            return None;
        }
        index = index.checked_mul(1000)?.checked_add(group.parse().ok()?)?;
    }
    Some(index)
}

/// The path of tile `index` at `level` (`entries` for a bundle), partial when `width < 256`.
pub fn path(level: &str, index: u64, width: u64) -> String {
    let mut groups = vec![format!("{:03}", index % 1000)];
    let mut rest = index / 1000;
    while rest > 0 {
        groups.push(format!("x{:03}", rest % 1000));
        rest /= 1000;
    }
    groups.reverse();
    let mut out = format!("tile/{level}/{}", groups.join("/"));
    if width < WIDTH {
        out.push_str(&format!(".p/{width}"));
    }
    out
}

/// An entry bundle: each entry as a big-endian `u16` length and its bytes.
pub fn bundle<'e>(entries: impl IntoIterator<Item = &'e [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let len = u16::try_from(entry.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&entry[..usize::from(len)]);
    }
    out
}

/// The entries of a bundle; `None` when it is cut short.
pub fn unbundle(mut bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut entries = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        entries.push(rest.get(..len)?);
        bytes = &rest[len..];
    }
    Some(entries)
}
