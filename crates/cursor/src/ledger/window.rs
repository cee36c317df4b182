//! Keeping only the newest entries' metadata in memory, and reading the rest back on demand.

use std::fmt;
use std::sync::Arc;

use super::{InMemoryLedger, Segment};
use crate::entry::{EntryMeta, Position};

/// Where an [`InMemoryLedger`] reads an entry's metadata back after dropping it from memory
/// ([`InMemoryLedger::with_meta_source`]): a broker that stores each entry (its payload and
/// metadata) on disk decodes it again from there.
///
/// `load` is called from any thread that reads the ledger (through `&self`), so it must be
/// cheap enough to call per entry and safe to call concurrently.
pub trait MetaSource: Send + Sync + fmt::Debug {
    /// The metadata of the entry at `p`, as it was appended, or `None` when it cannot be read.
    /// The ledger then answers as if the entry could not be read at all: [`get`] returns
    /// `None` and a [`read_range`] stops before it (a cursor reads it again later); its
    /// position, counts and bytes stay known.
    ///
    /// [`get`]: crate::Ledger::get
    /// [`read_range`]: crate::Ledger::read_range
    fn load(&self, p: Position) -> Option<Arc<EntryMeta>>;
}

/// Which entries keep their metadata, and where the others' is read back.
#[derive(Clone, Debug, Default)]
pub(super) struct Window {
    source: Option<Arc<dyn MetaSource>>,
    /// How many of the newest entries keep their metadata.
    keep: usize,
    /// How many entries keep their metadata now (counted only with a source).
    kept: usize,
    /// Index in `segs` of the first segment that may still keep metadata.
    seg_hint: usize,
}

impl InMemoryLedger {
    /// Keeps the metadata of only the newest `keep` entries in memory (at least one) and reads
    /// the others' back from `source` when they are read: per entry the ledger then holds 6
    /// bytes (its size and message count) instead of the metadata and its allocations. Positions, [`stats`](crate::Ledger::stats), totals and
    /// [`exists`](crate::Ledger::exists) never load; [`get`](crate::Ledger::get),
    /// [`read_range`](crate::Ledger::read_range) and searches by publish time load what is not
    /// kept. Entries already in the ledger beyond the newest `keep` are dropped at once.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cursor::{EntryMeta, InMemoryLedger, Ledger, MetaSource, Position};
    ///
    /// /// Every entry's publish time is its entry id (a real source decodes stored entries).
    /// #[derive(Debug)]
    /// struct Rebuild;
    /// impl MetaSource for Rebuild {
    ///     fn load(&self, p: Position) -> Option<Arc<EntryMeta>> {
    ///         Some(Arc::new(EntryMeta::simple(p.entry_id, 10)))
    ///     }
    /// }
    ///
    /// let mut l = InMemoryLedger::new(100).with_meta_source(Arc::new(Rebuild), 2);
    /// let ps: Vec<Position> = (0..5).map(|i| l.append(EntryMeta::simple(i, 10))).collect();
    /// assert!(l.meta(ps[0]).is_none(), "dropped from memory");
    /// assert!(l.meta(ps[4]).is_some(), "one of the newest two");
    /// assert_eq!(l.get(ps[0]).unwrap().meta.publish_time, 0, "read back");
    /// assert_eq!(l.read_range(ps[0], 10).len(), 5);
    /// assert_eq!(l.totals_in(ps[0].before(), ps[4]).bytes, 50);
    /// ```
    pub fn with_meta_source(mut self, source: Arc<dyn MetaSource>, keep: usize) -> Self {
        self.window = Window {
            source: Some(source),
            keep: keep.max(1),
            kept: 0,
            seg_hint: 0,
        };
        self.recount_kept();
        self.evict();
        self
    }

    /// How many entries keep their metadata in memory (all of them without a [`MetaSource`]).
    pub fn kept_metas(&self) -> usize {
        self.segs.iter().map(Segment::kept_len).sum()
    }

    /// After an entry was pushed with its metadata: drops the oldest kept metadata beyond the
    /// window.
    pub(super) fn after_push(&mut self) {
        if self.window.source.is_some() {
            self.window.kept += 1;
            self.evict();
        }
    }

    /// After entries were taken out: the count of kept metadata, again.
    pub(super) fn recount_kept(&mut self) {
        self.window.seg_hint = 0;
        self.window.kept = match self.window.source {
            Some(_) => self.kept_metas(),
            None => 0,
        };
    }

    /// The window's source, for a ledger split off this one.
    pub(super) fn window_for_split(&self) -> Window {
        Window {
            source: self.window.source.clone(),
            keep: self.window.keep,
            kept: 0,
            seg_hint: 0,
        }
    }

    fn evict(&mut self) {
        if self.window.source.is_none() {
            return;
        }
        while self.window.kept > self.window.keep {
            let Some(k) =
                (self.window.seg_hint..self.segs.len()).find(|&k| self.segs[k].kept_len() > 0)
            else {
                return;
            };
            self.window.seg_hint = k;
            if self.segs[k].drop_oldest_kept() {
                self.window.kept -= 1;
            }
        }
    }

    /// The metadata of `seg`'s entry `e` (which exists): kept, or loaded.
    #[inline]
    pub(super) fn meta_at(&self, seg: &Segment, e: u64) -> Option<Arc<EntryMeta>> {
        match seg.kept(e) {
            Some(m) => Some(m.clone()),
            None if seg.contains(e) => self.window.source.as_ref()?.load(Position::new(seg.id, e)),
            None => None,
        }
    }
}
