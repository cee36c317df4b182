//! `chunk-assignor`: placeholder until its issue lands; see `docs/ARCHITECTURE.md`.
