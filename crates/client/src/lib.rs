//! `client`: placeholder until its issue lands; see `docs/ARCHITECTURE.md`.
