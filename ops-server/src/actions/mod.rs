//! Actions: the book (records + audit log) and the executor (fair queue → storage).

pub mod audit;
pub mod book;
pub mod executor;
