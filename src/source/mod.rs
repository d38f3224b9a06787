//! The shared base of the folder sources (custom tools and modules, skills, commands): the
//! folder watch and the rules an item found in a folder is held to. Each source builds on
//! this and on [`crate::front_matter`], never on another source, so they stand side by side.

pub mod item;
pub mod watch;
