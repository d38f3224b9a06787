//! `toolhost skills …`: listing, checking and scaffolding skills without a daemon.
